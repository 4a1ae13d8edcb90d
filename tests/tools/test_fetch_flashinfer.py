"""scripts/fetch_flashinfer.py: only ``flashinfer/data/include/**`` of a wheel lands in
the destination, with the prefix dropped and the bytes unchanged; a wheel without the
headers, or with an unsafe member name, is an exit status 1 that leaves no folder
behind. Offline: the wheels are zip files written by the test (``--wheel``), so no
package index is contacted.
"""

from __future__ import annotations

import importlib.util
import pathlib
import zipfile

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "fetch_flashinfer.py"
HEADER = "flashinfer/data/include/flashinfer/attention/prefill.cuh"


@pytest.fixture(scope="module")
def fetch():
    spec = importlib.util.spec_from_file_location("fetch_flashinfer", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheel(path: pathlib.Path, members: dict[str, bytes]) -> pathlib.Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_extracts_only_the_include_tree(fetch, tmp_path):
    members = {
        HEADER: b"// prefill\n",
        "flashinfer/data/include/flashinfer/page.cuh": b"// page\n",
        "flashinfer/data/csrc/batch_prefill.cu": b"// not a header we take\n",
        "flashinfer/data/cutlass/include/cute/tensor.hpp": b"// cutlass\n",
        "flashinfer/__init__.py": b"",
    }
    wheel = _wheel(tmp_path / "flashinfer_python-0.5.3-py3-none-any.whl", members)
    dest = tmp_path / "out" / "include"
    assert fetch.main(["--wheel", str(wheel), "--dest", str(dest)]) == 0
    files = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert files == ["flashinfer/attention/prefill.cuh", "flashinfer/page.cuh"]
    assert (dest / "flashinfer/page.cuh").read_bytes() == b"// page\n"
    # Present headers are kept as they are unless --force.
    (dest / "flashinfer/page.cuh").write_bytes(b"// edited\n")
    assert fetch.main(["--wheel", str(wheel), "--dest", str(dest)]) == 0
    assert (dest / "flashinfer/page.cuh").read_bytes() == b"// edited\n"
    assert fetch.main(["--wheel", str(wheel), "--dest", str(dest), "--force"]) == 0
    assert (dest / "flashinfer/page.cuh").read_bytes() == b"// page\n"


@pytest.mark.parametrize(
    "members",
    [
        pytest.param({"flashinfer/data/include/flashinfer/page.cuh": b""}, id="no-prefill"),
        pytest.param({HEADER: b"", "flashinfer/data/include/../../evil.h": b""}, id="unsafe"),
    ],
)
def test_bad_wheel_is_exit_status_1(fetch, tmp_path, members, capsys):
    wheel = _wheel(tmp_path / "bad.whl", members)
    dest = tmp_path / "out" / "include"
    assert fetch.main(["--wheel", str(wheel), "--dest", str(dest)]) == 1
    assert "no FlashInfer headers" in capsys.readouterr().err
    assert not dest.exists()
    leftovers = list((tmp_path / "out").glob(".flashinfer-*"))
    assert leftovers == []


def test_not_a_zip_is_exit_status_1(fetch, tmp_path):
    wheel = tmp_path / "broken.whl"
    wheel.write_bytes(b"not a zip")
    assert fetch.main(["--wheel", str(wheel), "--dest", str(tmp_path / "inc")]) == 1
