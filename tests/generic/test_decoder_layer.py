"""README command 1's decoder layer, examples/decoder_layer.py, at a small size in every dtype.

It compares every stage of a polyops decoder layer (prefill + paged decode +
sampling) with plain float32 torch and returns 1 when any stage exceeds its
tolerance; the same layer and sampler written with stock torch ops in the same
dtype (the timing comparison) are checked against the float32 reference too. Its
speed is printed, not asserted (benchmarks measure speed, not tests).
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest
import torch

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "decoder_layer.py"
SMALL = ["--hidden", "128", "--heads", "4", "--kv-heads", "2", "--head-size", "32"]
SMALL += ["--intermediate", "256", "--vocab", "300", "--seq-lens", "1,7,40"]
SMALL += ["--decode-steps", "3", "--block-size", "8", "--max-positions", "128"]


def _load():
    spec = importlib.util.spec_from_file_location("decoder_layer", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # torch.compile looks the layer's module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_decoder_layer_matches_torch(dtype, capsys, tmp_path):
    json_path = tmp_path / "layer.json"
    status = _load().main(["--dtype", dtype, *SMALL, "--repeats", "2", "--json", str(json_path)])
    printed = capsys.readouterr().out
    assert "FAIL" not in printed, printed
    assert status == 0
    assert "paged_attention" in printed and "sampled tokens" in printed
    assert printed.count("stock torch output") == 4  # prefill + 3 decode steps, all "ok"
    assert "stock torch sampled tokens" in printed
    assert f"threads: {torch.get_num_threads()}, 2 runs per phase" in printed
    assert f"x stock torch in {dtype} (eager; median of 2 runs" in printed
    result = json.loads(json_path.read_text())
    assert result["errors_ok"] and result["threads"] == torch.get_num_threads()
    assert result["speedup_min"] <= result["speedup"] <= result["speedup_max"]
    assert result["result"] == ("PASS" if result["speedup"] >= result["target"] else "MISS")


def test_decoder_layer_compile_traces_both_sides(monkeypatch, capsys):
    """--compile: both sides' layer and sampler trace into whole graphs (fullgraph=True).

    Dynamo only here (backend "eager"): inductor's C++ builds take minutes on a small machine.
    """
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile_(fn, backend="eager", **kw))
    status = _load().main(["--compile", *SMALL, "--repeats", "1"])
    printed = capsys.readouterr().out
    assert "FAIL" not in printed, printed
    assert status == 0
    assert "via torch.compile(torch.ops.polyops)" in printed and "both sides compiled" in printed
