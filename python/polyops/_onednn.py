"""Where the oneDNN library of the ``onednn-cpu-gomp`` wheel is installed.

polyops opens ``libdnnl.so.3`` with dlopen at the first CPU matrix product
that wants it (docs/backends/cpu_gemm.md). The wheel puts the library in
``<prefix>/lib``, outside site-packages, so it is located through the
distribution's file list (which is right for venvs, ``--user`` and other
prefixes alike) rather than a path guessed from ``sys.prefix``.
"""

from __future__ import annotations

import importlib.metadata

DISTRIBUTION = "onednn-cpu-gomp"
LIBRARY = "libdnnl.so.3"


def library_path() -> str | None:
    """The absolute path of the installed wheel's ``libdnnl.so.3``, or None without it."""
    try:
        files = importlib.metadata.distribution(DISTRIBUTION).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == LIBRARY:
            path = file.locate().resolve()
            if path.is_file():
                return str(path)
    return None
