"""Autotune of the CPU matrix-product path (docs/backends/cpu_gemm.md, "Autotune").

With autotune on, the first product of a new geometry times every path that takes
it (oneDNN, the own kernels, OpenBLAS) on scratch output and runs the fastest from
then on. Checked here: results against float64 references, that the caller's
tensors see only the final write, that the path run is the recorded pick and gives
that path's own bits, the explicit override winning, persistence across processes,
and the errors of bad settings and files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
import torch

import polyops
from polyops.testing.references import gemm_reference, linear_reference
from polyops.testing.references import matmul_reference as ref_mm
from tests.conftest import BF16, F16, F32, make_tensor
from tests.generic._gemm_cases import assert_product_close, column_major, mag_mm

PATHS = ("onednn", "own", "openblas")


@pytest.fixture(autouse=True)
def autotune_on(monkeypatch):
    """Autotune on with an empty table, auto routing; restored afterwards."""
    monkeypatch.delenv("POLYOPS_CPU_GEMM", raising=False)
    was = polyops.autotune()
    polyops.clear_cache()
    polyops.autotune(True)
    yield
    polyops.autotune(was)
    polyops.clear_cache()


def _ran(pick: str) -> bool:
    """Whether this thread's last product ran on the path `pick` names."""
    path = polyops._C._cpu_gemm_path()
    return path == pick if pick != "own" else path not in ("onednn", "openblas")


def _forced(pick: str, fn, *args, **kwargs) -> torch.Tensor:
    """fn(*args) on the path `pick`, autotune off (POLYOPS_CPU_GEMM)."""
    polyops.autotune(False)
    old = os.environ.get("POLYOPS_CPU_GEMM")
    os.environ["POLYOPS_CPU_GEMM"] = pick
    try:
        return fn(*args, **kwargs)
    finally:
        if old is None:
            del os.environ["POLYOPS_CPU_GEMM"]
        else:
            os.environ["POLYOPS_CPU_GEMM"] = old
        polyops.autotune(True)


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("m", [1, 8, 33, 100])
def test_measures_once_and_runs_the_pick(dtype, m, gen):
    x, w = make_tensor((m, 96), dtype, gen), make_tensor((72, 96), dtype, gen)
    bias = make_tensor((72,), dtype, gen)
    out = polyops.linear(x, w, bias)
    entries = polyops.autotune_info()
    assert len(entries) == 1, entries
    entry = entries[0]
    assert entry["op"] == "linear" and entry["dtype"] == str(dtype).removeprefix("torch.")
    assert entry["shape"] == [1, m, 72, 96], entry
    # Every path that took the product was timed, OpenBLAS always; the pick is the fastest.
    assert "openblas" in entry["timings_us"] and set(entry["timings_us"]) <= set(PATHS)
    assert entry["pick"] == min(entry["timings_us"], key=entry["timings_us"].get)
    assert all(t > 0 for t in entry["timings_us"].values())
    assert _ran(entry["pick"]), (polyops._C._cpu_gemm_path(), entry)
    magnitude = mag_mm(x, w.T) + bias.double().abs()
    assert_product_close(out, linear_reference(x, w, bias), dtype, 96, magnitude)
    # The same geometry again (new data): no new measurement, the same path, the
    # bits that path gives when forced.
    x2 = make_tensor((m, 96), dtype, gen)
    again = polyops.linear(x2, w, bias)
    assert polyops.autotune_info() == entries
    assert _ran(entry["pick"])
    assert torch.equal(again, _forced(entry["pick"], polyops.linear, x2, w, bias))


def test_caller_tensors_see_only_the_final_write(gen):
    """The timing runs write scratch: a row-padded out keeps its padding, and gemm into
    c itself (out = c) reads the original c once."""
    a, b = make_tensor((40, 64), F32, gen), make_tensor((64, 48), F32, gen)
    base = torch.full((40, 52), 7.0)
    out = base[:, :48]
    polyops.matmul(a, b, out=out)
    assert (base[:, 48:] == 7.0).all()
    assert_product_close(out, ref_mm(a, b), F32, 64, mag_mm(a, b))
    c = make_tensor((40, 48), F32, gen)
    expected = gemm_reference(a, b, c, alpha=0.5, beta=-1.5)
    polyops.gemm(a, b, c, alpha=0.5, beta=-1.5, out=c)
    magnitude = 0.5 * mag_mm(a, b) + 1.5 * c.double().abs()
    assert_product_close(c, expected, F32, 64, magnitude)
    assert len(polyops.autotune_info()) == 2


def test_layouts_are_separate_geometries(gen):
    """Transposed, batched and strided operands are other keys; each is measured once."""
    a = make_tensor((3, 20, 50), BF16, gen)
    b = make_tensor((3, 50, 30), BF16, gen)
    calls = [
        (a, b),
        (a, column_major(make_tensor((3, 50, 30), BF16, gen))),
        (a[:, :, :40], make_tensor((40, 30), BF16, gen)),
    ]
    for x, y in calls:
        for _ in range(2):
            assert_product_close(
                polyops.matmul(x, y), ref_mm(x, y), BF16, x.shape[-1], mag_mm(x, y)
            )
    assert len(polyops.autotune_info()) == len(calls)


def test_explicit_path_wins(gen, monkeypatch):
    """POLYOPS_CPU_GEMM=openblas|own|onednn runs that path: nothing is measured."""
    monkeypatch.setenv("POLYOPS_CPU_GEMM", "openblas")
    x, w = make_tensor((50, 64), F32, gen), make_tensor((40, 64), F32, gen)
    polyops.linear(x, w)
    assert polyops._C._cpu_gemm_path() == "openblas"
    assert polyops.autotune_info() == []


def test_off_uses_no_pick(gen):
    """Picks are used only while autotune is on; clear_cache drops them."""
    x, w = make_tensor((50, 64), F32, gen), make_tensor((40, 64), F32, gen)
    polyops.autotune(False)
    fixed = polyops.linear(x, w)
    fixed_path = polyops._C._cpu_gemm_path()
    polyops.autotune(True)
    polyops.linear(x, w)
    assert len(polyops.autotune_info()) == 1
    polyops.autotune(False)
    assert torch.equal(polyops.linear(x, w), fixed)
    assert polyops._C._cpu_gemm_path() == fixed_path
    polyops.clear_cache()
    assert polyops.autotune_info() == []


def test_threads_measure_and_agree(gen):
    """Threads racing on new geometries: every result right, one entry per geometry."""
    shapes = [(m, 64, 40) for m in (3, 17, 40, 70)]
    inputs = [(make_tensor((m, k), F32, gen), make_tensor((n, k), F32, gen)) for m, k, n in shapes]
    errors: list[BaseException] = []

    def work():
        try:
            for x, w in inputs * 3:
                assert_product_close(
                    polyops.linear(x, w), linear_reference(x, w, None), F32, 64, mag_mm(x, w.T)
                )
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert sorted(e["shape"][1] for e in polyops.autotune_info()) == [3, 17, 40, 70]


def test_save_and_load(tmp_path, gen):
    x, w = make_tensor((50, 64), BF16, gen), make_tensor((40, 64), BF16, gen)
    polyops.linear(x, w)
    [entry] = polyops.autotune_info()
    path = tmp_path / "picks.json"
    assert polyops.save_autotune(path) == 1
    document = json.loads(path.read_text())
    assert document["format"] == "polyops-autotune" and document["version"] == 1
    polyops.clear_cache()
    assert polyops.load_autotune(path) == 1
    [loaded] = polyops.autotune_info()
    assert loaded["key"] == entry["key"] and loaded["pick"] == entry["pick"]
    assert loaded["timings_us"] == {}
    polyops.linear(x, w)
    assert _ran(entry["pick"]) and len(polyops.autotune_info()) == 1
    # Another kind of CPU: not used.
    document["machine"]["cpu"] = "some other CPU"
    path.write_text(json.dumps(document))
    polyops.clear_cache()
    with pytest.warns(RuntimeWarning, match="not used"):
        assert polyops.load_autotune(path) == 0
    assert polyops.autotune_info() == []


@pytest.mark.parametrize(
    "content, match",
    [
        ("not json", "is not JSON"),
        ('{"format": "other"}', "not a polyops autotune file"),
        ('{"format": "polyops-autotune", "version": 9}', "version 9"),
    ],
)
def test_load_bad_file(tmp_path, content, match):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=match):
        polyops.load_autotune(path)


def test_load_bad_entries(tmp_path, gen):
    x, w = make_tensor((50, 64), F32, gen), make_tensor((40, 64), F32, gen)
    polyops.linear(x, w)
    path = tmp_path / "picks.json"
    polyops.save_autotune(path)
    document = json.loads(path.read_text())
    for entry, match in [
        ({"op": "linear"}, "malformed entry"),
        ({"op": "linear", "key": [1, 2], "pick": "own"}, "key must be 26 integers"),
        ({"op": "linear", "key": ["x"], "pick": "own"}, "malformed key"),
        ({"op": "linear", "key": document["entries"][0]["key"], "pick": "mkl"}, "onednn, own"),
    ]:
        document["entries"] = [entry]
        path.write_text(json.dumps(document))
        with pytest.raises(ValueError, match=match):
            polyops.load_autotune(path)


def test_autotune_argument_type():
    with pytest.raises(TypeError, match="polyops.autotune: enabled must be a bool"):
        polyops.autotune(1)


SCRIPT = r"""
import sys, torch, polyops
print(polyops.autotune())
x, w = torch.ones(40, 64), torch.ones(30, 64)
polyops.linear(x, w)
print(len(polyops.autotune_info()), polyops.autotune_info()[0]["timings_us"] != {})
"""


def _run(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_environment(tmp_path):
    """POLYOPS_AUTOTUNE=1 turns it on; a bad value raises ValueError naming the variable;
    POLYOPS_AUTOTUNE_FILE carries the picks to the next process."""
    env = {"POLYOPS_CPU_GEMM": "auto"}
    bad = _run({**env, "POLYOPS_AUTOTUNE": "yes"})
    assert bad.returncode != 0
    assert "ValueError: polyops: environment variable POLYOPS_AUTOTUNE must be 0 or 1" in bad.stderr
    path = tmp_path / "picks.json"
    first = _run({**env, "POLYOPS_AUTOTUNE": "1", "POLYOPS_AUTOTUNE_FILE": str(path)})
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["True", "1", "True"]  # measured
    second = _run({**env, "POLYOPS_AUTOTUNE": "1", "POLYOPS_AUTOTUNE_FILE": str(path)})
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["True", "1", "False"]  # loaded, not measured again
