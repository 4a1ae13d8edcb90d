"""The CANN double's runtime strictness through ctypes: memory, devices and contexts,
descriptors, streams and synchronization, workspaces, executors and their retargeting,
the call log, and misuse that must be reported rather than crash (in a subprocess)."""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import torch

from tests.ascend._cann_double_bindings import (
    D2H,
    F32,
    H2D,
    I32,
    I64,
    INNER_NULLPTR,
    NULLPTR,
    PARAM_INVALID,
    Arg,
    out_arg,
)


def test_malloc_registry_and_memcpy_checks(cann):
    before = cann.live_bytes()
    p = cann.malloc(100)
    assert p % 32 == 0
    assert cann.live_bytes() == before + 100
    assert cann.is_device(p) and cann.is_device(p + 99) and cann.is_device(p + 127)  # +32 padding
    host = ctypes.create_string_buffer(256)
    hp = ctypes.addressof(host)
    assert not cann.is_device(hp)
    assert cann.memcpy(p, 64, hp, 100, H2D) == 100000  # count > destMax
    assert "destMax" in cann.error()
    assert cann.memcpy(p, 100, hp, 100, D2H) == 100000  # kind says src is device
    assert cann.memcpy(hp, 256, p, 100, H2D) == 100000
    assert cann.memcpy(p, 200, hp, 200, H2D) == 100000  # runs past the block
    assert cann.memcpy(p, 100, hp, 100, H2D) == 0
    assert cann.memcpy(p, 100, p, 100, 4) == 0  # ACL_MEMCPY_DEFAULT infers the kinds
    assert cann.memset(p, 100, 7, 100) == 0
    assert cann.memcpy(hp, 256, p, 100, D2H) == 0
    assert host.raw[:100] == b"\x07" * 100
    assert cann.free(hp) == 100000  # not from aclrtMalloc
    assert cann.free(p + 32) == 100000  # not the start of the block
    assert cann.free(p) == 0
    assert cann.free(p) == 100000  # double free
    assert cann.live_bytes() == before
    assert cann._malloc(ctypes.byref(ctypes.c_void_p()), 0, 0) == 100000


def test_init_device_and_context(cann):
    assert cann.init(None) == 100002  # once per process
    device = I32(-1)
    assert cann.get_device(ctypes.byref(device)) == 0 and device.value == 0
    ctx = ctypes.c_void_p()
    assert cann.get_context(ctypes.byref(ctx)) == 0 and ctx.value
    assert cann.set_context(ctx) == 0
    assert cann.set_device(5) == 107001
    result = {}

    def worker():
        d = I32(-1)
        result["get"] = cann.get_device(ctypes.byref(d))
        result["ctx"] = cann.get_context(ctypes.byref(ctypes.c_void_p()))
        result["msg"] = cann.error()  # thread-local

    import threading

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert result["get"] == 107002 and result["ctx"] == 107002
    assert "no context" in result["msg"]


def test_create_tensor_rejects_bad_data(cann):
    buf = cann.upload(torch.zeros(64))
    dims = (I64 * 1)(8)
    storage = (I64 * 1)(64)
    assert cann.create_tensor(dims, 1, 0, None, 0, 2, storage, 1, buf.ptr + 16) is None
    assert "32-byte aligned" in cann.error()
    host = torch.zeros(64)
    assert cann.create_tensor(dims, 1, 0, None, 0, 2, storage, 1, host.data_ptr()) is None
    assert "device memory" in cann.error()
    assert cann.create_tensor(dims, 1, 0, None, 60, 2, storage, 1, buf.ptr) is None  # 60 + 8 > 64
    assert "does not fit" in cann.error()
    big = (I64 * 1)(1000)  # storage larger than the allocation
    assert cann.create_tensor(dims, 1, 0, None, 0, 2, big, 1, buf.ptr) is None
    assert cann.create_tensor(None, 1, 0, None, 0, 2, storage, 1, buf.ptr) is None
    assert cann.create_tensor(dims, 1, 29, None, 0, 2, storage, 1, buf.ptr) is None  # FRACTAL_NZ
    assert cann.create_tensor(dims, 1, 0, None, 0, 29, storage, 1, buf.ptr) is None
    # Argument order trap 8: ACL_FORMAT_ND passed as the offset shifts the data by 2 elements.
    src = torch.arange(64, dtype=torch.float32)
    dev = cann.upload(src)
    shifted = cann.create_tensor(dims, 1, 0, None, 2, 2, storage, 1, dev.ptr)
    out = out_arg(cann, (8,), F32)
    cann.run("aclnnInplaceCopy", out.desc, shifted)
    assert torch.equal(out.result(), src[2:10])


def test_stale_read_without_sync_and_stream_queues(cann):
    """Work runs only at synchronization points: a host read before the sync sees old data."""
    x = Arg(cann, torch.ones(8))
    out = out_arg(cann, (8,), F32)
    stream = ctypes.c_void_p()
    assert cann.create_stream(ctypes.byref(stream)) == 0
    status, ws, ex = cann.phase_one("aclnnMul", x.desc, x.desc, out.desc)
    assert status == 0
    assert cann.launch("aclnnMul", ws, ex, stream) == 0
    assert cann.pending() >= 1
    raw = (ctypes.c_float * 8).from_address(out.buf.ptr)  # a host read of device memory
    assert all(v != v for v in raw)  # still the NaN the output was initialized with
    assert cann.sync_stream(None) == 0  # the default stream does not cover this one
    assert all(v != v for v in raw)
    assert cann.sync_stream(stream) == 0
    assert list(raw) == [1.0] * 8
    # Async copies queue too; destroying the stream runs its pending work.
    host = torch.full((8,), 3.0)
    assert cann.memcpy_async(x.buf.ptr, 32, host.data_ptr(), 32, H2D, stream) == 0
    assert cann.download(x.buf).tolist() == [3.0] * 8  # synchronous memcpy drains every stream
    host2 = torch.full((8,), 4.0)
    assert cann.memcpy_async(x.buf.ptr, 32, host2.data_ptr(), 32, H2D, stream) == 0
    assert cann.destroy_stream(stream) == 0
    assert list((ctypes.c_float * 8).from_address(x.buf.ptr)) == [4.0] * 8
    assert cann.sync_stream(stream) == 100000  # destroyed
    assert cann.pending() == 0


def test_memory_freed_before_sync_is_reported(cann):
    x = Arg(cann, torch.ones(8))
    out = out_arg(cann, (8,), F32)
    status, ws, ex = cann.phase_one("aclnnMul", x.desc, x.desc, out.desc)
    assert cann.launch("aclnnMul", ws, ex) == 0
    assert cann.free(out.buf.ptr) == 0
    assert cann.sync_device() == 507899
    assert "freed" in cann.error()


def test_workspace_checks(cann):
    x = Arg(cann, torch.ones(8))
    status, ws, ex = cann.phase_one("aclnnMul", x.desc, x.desc, x.desc)
    assert status == 0 and ws > 0
    small = cann.malloc(ws)
    assert cann.phase2["aclnnMul"](small, ws - 1, ex, None) == PARAM_INVALID
    assert "smaller" in cann.error()
    host = ctypes.create_string_buffer(ws)
    assert cann.phase2["aclnnMul"](ctypes.addressof(host), ws, ex, None) == PARAM_INVALID
    assert cann.phase2["aclnnMul"](None, ws, ex, None) == PARAM_INVALID
    assert cann.phase2["aclnnAdd"](small, ws, ex, None) == PARAM_INVALID  # another op's executor
    bogus_stream = ctypes.c_void_p(small)
    assert cann.phase2["aclnnMul"](small, ws, ex, bogus_stream) == PARAM_INVALID
    # Failed launches did not consume the executor.
    assert cann.phase2["aclnnMul"](small, ws, ex, None) == 0
    assert cann.sync_device() == 0


def test_repeatable_executor_retargeting(cann):
    a, b = Arg(cann, torch.full((4,), 2.0)), Arg(cann, torch.full((4,), 5.0))
    other = cann.upload(torch.full((4,), 10.0))
    out = out_arg(cann, (4,), F32)
    status, ws, ex = cann.phase_one("aclnnMul", a.desc, b.desc, out.desc)
    assert status == 0 and cann.repeatable(ex) == 0
    workspace = cann.malloc(ws)
    for _ in range(2):  # repeatable: phase 2 may run many times
        assert cann.launch("aclnnMul", ws, ex, workspace=workspace) == 0
    assert cann.sync_device() == 0 and out.result().tolist() == [10.0] * 4
    # aclSetRawTensorAddr changes only the descriptor: the executor keeps its snapshot.
    assert cann.set_raw_addr(a.desc, other.ptr) == 0
    assert cann.launch("aclnnMul", ws, ex, workspace=workspace) == 0
    assert cann.sync_device() == 0 and out.result().tolist() == [10.0] * 4
    # aclSetInputTensorAddr retargets the executor (index 0 = self, 1 = other).
    assert cann.set_input_addr(ex, 0, a.desc, other.ptr) == 0
    assert cann.launch("aclnnMul", ws, ex, workspace=workspace) == 0
    assert cann.sync_device() == 0 and out.result().tolist() == [50.0] * 4
    # aclSetTensorAddr: inputs then outputs in one index space.
    out2 = out_arg(cann, (4,), F32)
    assert cann.set_tensor_addr(ex, 2, out.desc, out2.buf.ptr) == 0
    assert cann.launch("aclnnMul", ws, ex, workspace=workspace) == 0
    assert cann.sync_device() == 0 and out2.result().tolist() == [50.0] * 4
    assert cann.set_input_addr(ex, 2, None, other.ptr) == PARAM_INVALID
    assert cann.set_output_addr(ex, 1, None, other.ptr) == PARAM_INVALID
    assert cann.set_input_addr(ex, 0, None, other.ptr + 4) == PARAM_INVALID  # unaligned
    assert cann.destroy_executor(ex) == 0
    assert cann.launch("aclnnMul", ws, ex, workspace=workspace) == INNER_NULLPTR


def test_dynamic_input_addr_for_cat(cann):
    parts = [Arg(cann, torch.full((2,), float(i))) for i in range(3)]
    replacement = cann.upload(torch.full((2,), 9.0))
    out = out_arg(cann, (6,), F32)
    lst = cann.tensor_list([p.desc for p in parts])
    status, ws, ex = cann.phase_one("aclnnCat", lst, 0, out.desc)
    assert status == 0 and cann.repeatable(ex) == 0
    assert cann.set_dynamic_addr(ex, 0, 1, lst, replacement.ptr) == 0
    assert cann.set_dynamic_addr(ex, 0, 3, lst, replacement.ptr) == PARAM_INVALID
    assert cann.set_dynamic_addr(ex, 1, 0, lst, replacement.ptr) == PARAM_INVALID
    assert cann.launch("aclnnCat", ws, ex) == 0
    assert cann.sync_device() == 0
    assert out.result().tolist() == [0.0, 0.0, 9.0, 9.0, 2.0, 2.0]
    assert cann.destroy_executor(ex) == 0
    assert cann.destroy_tensor_list(lst) == 0


def test_call_log(cann):
    x = Arg(cann, torch.ones(4))
    cann.clear_log()
    status, ws, ex = cann.phase_one("aclnnAdd", x.desc, x.desc, cann.scalar(1.0), x.desc)
    assert cann.launch("aclnnAdd", ws, ex) == 0
    assert cann.sync_stream(None) == 0
    cann.download(x.buf)
    log = cann.call_log()
    names = [r["function"] for r in log]
    assert names == [
        "aclnnAddGetWorkspaceSize",
        "aclrtMalloc",
        "aclnnAdd",
        "aclrtSynchronizeStream",
        "aclrtMemcpy",
    ]
    p1, malloc, p2, sync, memcpy = log
    assert p1["phase"] == 1 and p1["workspace"] == ws and p1["executor"] > 0 and p1["status"] == 0
    assert p2["phase"] == 2 and p2["executor"] == p1["executor"] and p2["stream"] == 0
    assert malloc["phase"] == 0 and malloc["bytes"] == ws
    assert sync["stream"] == 0 and memcpy["kind"] == D2H
    # A second launch of the (freed, non-repeatable) executor is logged as an error.
    cann.clear_log()
    assert cann.launch("aclnnAdd", ws, ex) == INNER_NULLPTR
    failed = cann.call_log()[-1]
    assert failed["function"] == "aclnnAdd" and failed["status"] == INNER_NULLPTR
    assert "already destroyed" in failed["error"]


# Misuse that crashes a process with a careless implementation runs in a subprocess.
SUBPROCESS_SCRIPT = """
import ctypes, json, pathlib, sys
sys.path.insert(0, {tests!r})
import torch
import _cann_double_bindings as t
c = t.Cann(pathlib.Path({directory!r}))
r = {{}}
x = t.Arg(c, torch.ones(4))
r["version"] = (lambda b: (c.version(b"CANN", b), b.value.decode())[1])(
    ctypes.create_string_buffer(128))
r["destroy1"] = c.destroy_tensor(x.desc)
r["destroy2"] = c.destroy_tensor(x.desc)
r["destroy2_msg"] = c.error()
y = t.Arg(c, torch.ones(4))
r["use_destroyed"] = c.phase_one("aclnnMul", x.desc, y.desc, y.desc)[0]
st, ws, ex = c.phase_one("aclnnMul", y.desc, y.desc, y.desc)
r["launch1"] = c.launch("aclnnMul", ws, ex)
r["launch2"] = c.launch("aclnnMul", ws, ex)
r["launch2_msg"] = c.error()
r["destroy_freed_executor"] = c.destroy_executor(ex)
st, ws, ex = c.phase_one("aclnnMul", y.desc, y.desc, y.desc)
r["destroy_nonrepeatable"] = c.destroy_executor(ex)
a, b = t.Arg(c, torch.ones(2)), t.Arg(c, torch.ones(2))
lst = c.tensor_list([a.desc, b.desc])
r["list_destroy"] = c.destroy_tensor_list(lst)
r["element_after_list"] = c.destroy_tensor(a.desc)
r["list_twice"] = c.destroy_tensor_list(lst)
r["set_addr_null_executor"] = c.set_input_addr(None, 0, None, None)
r["sync"] = c.sync_device()
print(json.dumps(r))
"""


def run_script(directory, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    tests = str(pathlib.Path(__file__).resolve().parent)
    code = textwrap.dedent(SUBPROCESS_SCRIPT.format(tests=tests, directory=str(directory)))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_misuse_is_reported_not_crashing(cann):
    r = run_script(cann.dir)
    assert r["version"] == "8.5.0"
    assert r["destroy1"] == 0
    assert r["destroy2"] == PARAM_INVALID and "already destroyed" in r["destroy2_msg"]
    assert r["use_destroyed"] == PARAM_INVALID
    assert r["launch1"] == 0
    assert r["launch2"] == INNER_NULLPTR and "already destroyed" in r["launch2_msg"]
    assert r["destroy_freed_executor"] == INNER_NULLPTR
    assert r["destroy_nonrepeatable"] == PARAM_INVALID
    assert r["list_destroy"] == 0
    assert r["element_after_list"] == PARAM_INVALID  # the list owned (and destroyed) it
    assert r["list_twice"] == PARAM_INVALID
    assert r["set_addr_null_executor"] == NULLPTR
    assert r["sync"] == 0


def test_version_string_env(cann):
    r = run_script(cann.dir, {"POLYOPS_CANN_DOUBLE_VERSION": "8.3.RC1.alpha003"})
    assert r["version"] == "8.3.RC1.alpha003"
