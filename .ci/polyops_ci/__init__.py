"""The polyops hardware CI runner, split by concern; ``.ci/run.py`` is its entry point.

``config``: ``.ci/config.yaml`` and its validation. ``verdict``: JUnit counting and
``judge()``. ``devices``: device selection and passthrough. ``process``: streamed
subprocesses and short ``docker`` calls. ``plan``: a :class:`~polyops_ci.plan.Run` and the
commands, scripts and environment of its stages. ``ownership``: handing the results dir
back to the invoking user. ``execute``: running the stages in Docker or ``--local``.
``report``: ``--dry-run`` output and the summary. ``cli``: options and ``main()``.
"""
