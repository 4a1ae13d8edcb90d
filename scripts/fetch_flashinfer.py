"""Put FlashInfer's C++ headers where the CUDA build finds them (docs/backends/cuda.md).

The FlashInfer slots of flash_attention and paged_attention compile
FlashInfer's FA2 templates. Those headers ship inside the pure-Python
``flashinfer-python`` wheel under ``flashinfer/data/include/``; this script
takes that folder, and nothing else, out of the pinned wheel::

    python scripts/fetch_flashinfer.py                   # pip download, extract
    python scripts/fetch_flashinfer.py --wheel FILE.whl  # reuse a wheel, offline

The default destination ``third_party/flashinfer/include`` is ignored by git
(the headers are never committed) and is what CMake looks for when
``POLYOPS_FLASHINFER_INCLUDE_DIR`` is not given. To build on a machine
without a package index, run this where one is reachable and copy the folder
(3.1 MB) along with the source tree.

Exit status: 0 when the headers are in place, 1 when they could not be had
(no network, no such wheel, a wheel without the headers); CMake's
``POLYOPS_FLASHINFER=AUTO`` then leaves the slots out.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

VERSION = "0.5.3"
# Inside the wheel; everything under it is copied, the prefix dropped.
PREFIX = "flashinfer/data/include/"
# One file the slots need: its presence marks a complete extraction.
MARKER = pathlib.Path("flashinfer/attention/prefill.cuh")
DEFAULT_DEST = pathlib.Path(__file__).resolve().parent.parent / "third_party/flashinfer/include"


def extract_headers(wheel: pathlib.Path, dest: pathlib.Path) -> int:
    """Copies ``flashinfer/data/include/**`` of ``wheel`` into ``dest``; returns the file count.

    The copy goes to a temporary sibling first and is renamed into place, so
    an interrupted run never leaves a half-filled ``dest`` behind.
    """
    with zipfile.ZipFile(wheel) as archive:
        members = [
            info
            for info in archive.infolist()
            if info.filename.startswith(PREFIX) and not info.is_dir()
        ]
        if not any(info.filename == PREFIX + MARKER.as_posix() for info in members):
            raise RuntimeError(f"{wheel.name} has no {PREFIX}{MARKER}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = pathlib.Path(tempfile.mkdtemp(prefix=".flashinfer-", dir=dest.parent))
        try:
            for info in members:
                relative = pathlib.PurePosixPath(info.filename[len(PREFIX) :])
                if relative.is_absolute() or ".." in relative.parts:
                    raise RuntimeError(f"{wheel.name}: unsafe member name {info.filename!r}")
                target = staging.joinpath(*relative.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as source, open(target, "wb") as sink:
                    shutil.copyfileobj(source, sink)
            if dest.exists():
                shutil.rmtree(dest)
            staging.rename(dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return len(members)


def download_wheel(version: str, folder: pathlib.Path) -> pathlib.Path:
    """``pip download --no-deps flashinfer-python==version`` into ``folder``; returns the wheel."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        # Offline machines fail in seconds instead of pip's minute of retries.
        "--retries",
        "1",
        "--timeout",
        "15",
        "-d",
        str(folder),
        f"flashinfer-python=={version}",
    ]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wheels = sorted(folder.glob(f"flashinfer_python-{version}-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download gave no flashinfer_python-{version} wheel")
    return wheels[0]


def main(argv: list[str] | None = None) -> int:
    """Command line entry; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=pathlib.Path, default=DEFAULT_DEST)
    parser.add_argument("--wheel", type=pathlib.Path, help="a flashinfer-python wheel to reuse")
    parser.add_argument("--version", default=VERSION, help=f"wheel version (default {VERSION})")
    parser.add_argument(
        "--force", action="store_true", help="extract again even if the headers are there"
    )
    args = parser.parse_args(argv)
    dest = args.dest.resolve()
    if (dest / MARKER).is_file() and not args.force:
        print(f"fetch_flashinfer: headers already in {dest}")
        return 0
    try:
        if args.wheel is not None:
            count = extract_headers(args.wheel, dest)
        else:
            with tempfile.TemporaryDirectory() as folder:
                count = extract_headers(download_wheel(args.version, pathlib.Path(folder)), dest)
    except (OSError, RuntimeError, subprocess.CalledProcessError, zipfile.BadZipFile) as error:
        print(f"fetch_flashinfer: no FlashInfer headers: {error}", file=sys.stderr)
        return 1
    print(f"fetch_flashinfer: {count} files in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
