"""The issue-3 main job, examples/decoder_layer.py, at a small size in every dtype.

It compares every stage of a polyops decoder layer (prefill + paged decode +
sampling) with plain float32 torch and returns 1 when any stage exceeds its
tolerance; the same layer written with stock torch ops in the same dtype (the
timing comparison) is checked against the float32 reference too. Its speed is
printed, not asserted (benchmarks measure speed, not tests).
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "decoder_layer.py"


def _load():
    spec = importlib.util.spec_from_file_location("decoder_layer", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_decoder_layer_matches_torch(dtype, capsys):
    small = ["--hidden", "128", "--heads", "4", "--kv-heads", "2", "--head-size", "32"]
    small += ["--intermediate", "256", "--vocab", "300", "--seq-lens", "1,7,40"]
    small += ["--decode-steps", "3", "--block-size", "8", "--max-positions", "128"]
    small += ["--repeats", "1"]
    status = _load().main(["--dtype", dtype, *small])
    printed = capsys.readouterr().out
    assert "FAIL" not in printed, printed
    assert status == 0
    assert "paged_attention" in printed and "sampled tokens" in printed
    assert printed.count("stock torch output") == 4  # prefill + 3 decode steps, all "ok"
    assert f"stock torch ops in {dtype}" in printed
