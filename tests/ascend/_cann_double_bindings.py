"""ctypes bindings of the CANN test double (src/cann_double), shared by the
test_cann_double_*.py files.

No torch device is involved: memory comes from the double's aclrtMalloc and
moves with aclrtMemcpy; descriptors are built with aclCreateTensor; results are
compared with float64 references written from the math on the CPU.

The libraries are found in $POLYOPS_CANN_DOUBLE_DIR, else next to the
installed polyops package (polyops/_cann_double), else in this worktree's
build directory.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import pathlib

import pytest
import torch

LIB_NAMES = ("libascendcl.so", "libnnopbase.so", "libopapi.so")

ACL_DTYPES = {
    torch.float32: 0,
    torch.float16: 1,
    torch.int8: 2,
    torch.int32: 3,
    torch.uint8: 4,
    torch.int16: 6,
    torch.int64: 9,
    torch.float64: 11,
    torch.bool: 12,
    torch.bfloat16: 27,
}
H2D, D2H, D2D = 1, 2, 3
NULLPTR, PARAM_INVALID, TILING, INNER_NULLPTR = 161001, 161002, 561002, 561103
F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
FLOATS = [F16, BF16, F32]
# |actual - expected| <= atol + rtol * |expected| against float64 references.
TOL = {F16: (2e-3, 2e-3), BF16: (1.6e-2, 1.6e-2), F32: (1e-5, 1e-5), torch.float64: (1e-12, 1e-12)}


def find_library_dir() -> pathlib.Path | None:
    candidates = []
    if os.environ.get("POLYOPS_CANN_DOUBLE_DIR"):
        candidates.append(pathlib.Path(os.environ["POLYOPS_CANN_DOUBLE_DIR"]))
    spec = importlib.util.find_spec("polyops")
    if spec is not None and spec.origin is not None:
        candidates.append(pathlib.Path(spec.origin).parent / "_cann_double")
    root = pathlib.Path(__file__).resolve().parents[2]
    candidates.append(root / "build" / "src" / "cann_double")
    for directory in candidates:
        if all((directory / name).is_file() for name in LIB_NAMES):
            return directory
    return None


def _fn(lib, name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


P, I32, I64, U64, SZ = (
    ctypes.c_void_p,
    ctypes.c_int32,
    ctypes.c_int64,
    ctypes.c_uint64,
    ctypes.c_size_t,
)
PP = ctypes.POINTER(ctypes.c_void_p)
PU64 = ctypes.POINTER(ctypes.c_uint64)

# aclnn GetWorkspaceSize argument types (without the trailing ws, executor).
OP_ARGS = {
    "aclnnAdd": [P, P, P, P],
    "aclnnMul": [P, P, P],
    "aclnnCast": [P, I32, P],
    "aclnnCat": [P, I64, P],
    "aclnnRmsNorm": [P, P, ctypes.c_double, P, P],
    "aclnnAddRmsNorm": [P, P, P, ctypes.c_double, P, P, P],
    "aclnnInplaceAddRmsNorm": [P, P, P, ctypes.c_double, P],
    "aclnnSwiGlu": [P, I64, P],
    "aclnnSilu": [P, P],
    "aclnnSoftmax": [P, I64, P],
    "aclnnInplaceMaskedFillScalar": [P, P, P],
    "aclnnInplaceCopy": [P, P],
    "aclnnMatmul": [P, P, P, ctypes.c_int8],
    "aclnnMm": [P, P, P, ctypes.c_int8],
    "aclnnAddmm": [P, P, P, P, P, P, ctypes.c_int8],
    "aclnnBaddbmm": [P, P, P, P, P, P, ctypes.c_int8],
    "aclnnRopeWithSinCosCache": [P, P, P, P, P, I64, ctypes.c_bool, P, P],
    "aclnnApplyRotaryPosEmbV2": [P, P, P, P, I64, ctypes.c_char_p],
    "aclnnScatterPaKvCache": [P, P, P, P, P, P, P, P, ctypes.c_char_p, ctypes.c_char_p, P, P],
    "aclnnApplyTopKTopP": [P, P, P, P],
    "aclnnFusedInferAttentionScoreV3": [P] * 27
    + [I64, ctypes.c_double, I64, I64, ctypes.c_char_p, I64, I64, I64, I64, I64, ctypes.c_bool]
    + [I64, I64, P, P],
    "aclnnIncreFlashAttentionV4": [P] * 15
    + [I64, ctypes.c_double, ctypes.c_char_p, I64, I64, I64, P],
}


class DeviceBuffer:
    """aclrtMalloc memory holding a copy of a (contiguous) torch tensor."""

    def __init__(self, cann: Cann, ptr: int, nbytes: int, dtype: torch.dtype, numel: int):
        self.cann, self.ptr, self.nbytes, self.dtype, self.numel = cann, ptr, nbytes, dtype, numel


class Cann:
    """ctypes bindings of the double plus helpers that move torch tensors."""

    def __init__(self, directory: pathlib.Path):
        self.dir = directory
        # Only libopapi.so is opened by name: nnopbase and ascendcl symbols must
        # resolve through its DT_NEEDED entries, as vllm-ascend does with CANN.
        self.op = ctypes.CDLL(str(directory / "libopapi.so"))
        self.rt = ctypes.CDLL(str(directory / "libascendcl.so"))
        op, rt = self.op, self.rt
        self.init = _fn(rt, "aclInit", I32, ctypes.c_char_p)
        self.set_device = _fn(rt, "aclrtSetDevice", I32, I32)
        self.get_device = _fn(rt, "aclrtGetDevice", I32, ctypes.POINTER(I32))
        self._malloc = _fn(rt, "aclrtMalloc", I32, PP, SZ, I32)
        self.free = _fn(rt, "aclrtFree", I32, P)
        self.memcpy = _fn(rt, "aclrtMemcpy", I32, P, SZ, P, SZ, I32)
        self.memcpy_async = _fn(rt, "aclrtMemcpyAsync", I32, P, SZ, P, SZ, I32, P)
        self.memset = _fn(rt, "aclrtMemset", I32, P, SZ, I32, SZ)
        self.create_stream = _fn(rt, "aclrtCreateStream", I32, PP)
        self.destroy_stream = _fn(rt, "aclrtDestroyStream", I32, P)
        self.sync_stream = _fn(rt, "aclrtSynchronizeStream", I32, P)
        self.sync_device = _fn(rt, "aclrtSynchronizeDevice", I32)
        self.get_context = _fn(rt, "aclrtGetCurrentContext", I32, PP)
        self.set_context = _fn(rt, "aclrtSetCurrentContext", I32, P)
        self.err_msg = _fn(rt, "aclGetRecentErrMsg", ctypes.c_char_p)
        self.version = _fn(rt, "aclsysGetVersionStr", I32, ctypes.c_char_p, ctypes.c_char_p)
        self.call_log_raw = _fn(rt, "polyopsDoubleCallLog", ctypes.c_char_p)
        self.clear_log = _fn(rt, "polyopsDoubleClearCallLog", None)
        self.is_device = _fn(rt, "polyopsDoubleIsDevicePointer", ctypes.c_int, P)
        self.live_bytes = _fn(rt, "polyopsDoubleLiveBytes", SZ)
        self.pending = _fn(rt, "polyopsDoublePendingWork", SZ)
        self.create_tensor = _fn(
            op,
            "aclCreateTensor",
            P,
            ctypes.POINTER(I64),
            U64,
            I32,
            ctypes.POINTER(I64),
            I64,
            I32,
            ctypes.POINTER(I64),
            U64,
            P,
        )
        self.destroy_tensor = _fn(op, "aclDestroyTensor", I32, P)
        self.create_scalar = _fn(op, "aclCreateScalar", P, P, I32)
        self.destroy_scalar = _fn(op, "aclDestroyScalar", I32, P)
        self.create_int_array = _fn(op, "aclCreateIntArray", P, ctypes.POINTER(I64), U64)
        self.destroy_int_array = _fn(op, "aclDestroyIntArray", I32, P)
        self.create_tensor_list = _fn(op, "aclCreateTensorList", P, PP, U64)
        self.destroy_tensor_list = _fn(op, "aclDestroyTensorList", I32, P)
        self.repeatable = _fn(op, "aclSetAclOpExecutorRepeatable", I32, P)
        self.destroy_executor = _fn(op, "aclDestroyAclOpExecutor", I32, P)
        self.set_input_addr = _fn(op, "aclSetInputTensorAddr", I32, P, SZ, P, P)
        self.set_output_addr = _fn(op, "aclSetOutputTensorAddr", I32, P, SZ, P, P)
        self.set_tensor_addr = _fn(op, "aclSetTensorAddr", I32, P, SZ, P, P)
        self.set_dynamic_addr = _fn(op, "aclSetDynamicInputTensorAddr", I32, P, SZ, SZ, P, P)
        self.set_raw_addr = _fn(op, "aclSetRawTensorAddr", I32, P, P)
        self.live_executors = _fn(op, "polyopsDoubleLiveExecutors", SZ)
        self.live_descriptors = _fn(op, "polyopsDoubleLiveDescriptors", SZ)
        self.phase1 = {}
        self.phase2 = {}
        for name, args in OP_ARGS.items():
            if not hasattr(op, name):
                continue
            self.phase1[name] = _fn(op, name + "GetWorkspaceSize", I32, *args, PU64, PP)
            self.phase2[name] = _fn(op, name, I32, P, U64, P, P)
        self.init(None)  # 0 or 100002 when another test initialized already
        assert self.set_device(0) == 0
        self._owned: list = []

    # --- memory -------------------------------------------------------------
    def malloc(self, nbytes: int) -> int:
        p = ctypes.c_void_p()
        assert self._malloc(ctypes.byref(p), nbytes, 0) == 0, self.error()
        return p.value

    def error(self) -> str:
        return (self.err_msg() or b"").decode()

    def call_log(self) -> list[dict]:
        return json.loads(self.call_log_raw().decode())

    def upload(self, t: torch.Tensor) -> DeviceBuffer:
        """A device copy of t's elements (contiguous)."""
        t = t.contiguous()
        nbytes = max(t.numel() * t.element_size(), 1)
        ptr = self.malloc(nbytes)
        if t.numel():
            assert self.memcpy(ptr, nbytes, t.data_ptr(), t.numel() * t.element_size(), H2D) == 0
        return DeviceBuffer(self, ptr, nbytes, t.dtype, t.numel())

    def empty(self, numel: int, dtype: torch.dtype) -> DeviceBuffer:
        nbytes = max(numel * torch.empty(0, dtype=dtype).element_size(), 1)
        return DeviceBuffer(self, self.malloc(nbytes), nbytes, dtype, numel)

    def download(self, buf: DeviceBuffer) -> torch.Tensor:
        host = torch.empty(buf.numel, dtype=buf.dtype)
        if buf.numel:
            n = buf.numel * host.element_size()
            assert self.memcpy(host.data_ptr(), n, buf.ptr, n, D2H) == 0, self.error()
        return host

    # --- descriptors --------------------------------------------------------
    def tensor(self, buf: DeviceBuffer, shape=None, strides=None, offset=0, dtype=None) -> int:
        """aclCreateTensor over buf's whole storage (storageDims = [numel])."""
        dtype = dtype or buf.dtype
        shape = list(buf_shape(buf) if shape is None else shape)
        dims = (I64 * max(len(shape), 1))(*shape)
        st = None if strides is None else (I64 * max(len(strides), 1))(*strides)
        storage = (I64 * 1)(buf.numel)
        t = self.create_tensor(
            dims, len(shape), ACL_DTYPES[dtype], st, offset, 2, storage, 1, buf.ptr
        )
        assert t, self.error()
        return t

    def scalar(self, value, dtype=torch.float32) -> int:
        host = torch.tensor([value], dtype=dtype)
        s = self.create_scalar(host.data_ptr(), ACL_DTYPES[dtype])
        assert s, self.error()
        return s

    def int_array(self, values) -> int:
        values = list(values)
        arr = (I64 * max(len(values), 1))(*values)
        a = self.create_int_array(arr, len(values))
        assert a, self.error()
        return a

    def tensor_list(self, tensors) -> int:
        arr = (ctypes.c_void_p * len(tensors))(*tensors)
        lst = self.create_tensor_list(arr, len(tensors))
        assert lst, self.error()
        return lst

    # --- ops ----------------------------------------------------------------
    def phase_one(self, name: str, *args) -> tuple[int, int, int]:
        ws = ctypes.c_uint64(0)
        ex = ctypes.c_void_p()
        status = self.phase1[name](*args, ctypes.byref(ws), ctypes.byref(ex))
        return status, ws.value, ex.value

    def launch(self, name, ws_size, executor, stream=None, workspace=None) -> int:
        if workspace is None:
            workspace = self.malloc(ws_size) if ws_size else None
        return self.phase2[name](workspace, ws_size, executor, stream)

    def run(self, name: str, *args, stream=None) -> None:
        """Both phases, then a stream sync; asserts success."""
        status, ws, ex = self.phase_one(name, *args)
        assert status == 0, f"{name}GetWorkspaceSize: {status} {self.error()}"
        assert ws > 0
        workspace = self.malloc(ws)
        assert self.phase2[name](workspace, ws, ex, stream) == 0, self.error()
        assert self.sync_stream(stream) == 0, self.error()
        self.free(workspace)

    def expect_fail(self, code: int, name: str, *args) -> str:
        status, _, _ = self.phase_one(name, *args)
        assert status == code, f"{name}: expected {code}, got {status} ({self.error()})"
        return self.error()


def buf_shape(buf: DeviceBuffer):
    return [buf.numel]


def open_cann() -> Cann:
    """The bindings, for a test module's `cann` fixture; skips the module when the double
    is not built."""
    directory = find_library_dir()
    if directory is None:
        pytest.skip("the CANN double is not built (cmake -DWITH_CANN_DOUBLE=ON; ninja cann_double)")
    return Cann(directory)


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol = TOL.get(dtype, (0, 0))
    torch.testing.assert_close(
        actual.to(torch.float64), expected.to(torch.float64), atol=atol, rtol=rtol, equal_nan=True
    )


class Arg:
    """A torch tensor placed on the device, possibly as a strided view of a larger storage."""

    def __init__(self, cann: Cann, t: torch.Tensor, view: str = "contiguous"):
        self.cann = cann
        if view == "transposed" and t.dim() >= 2:
            # Storage holds t^T contiguous; the descriptor swaps the last two strides.
            storage = t.transpose(-1, -2).contiguous()
            self.host = storage.transpose(-1, -2)
        elif view == "offset":
            # Rows padded by 3 elements and a leading offset of 5 elements.
            padded = torch.zeros(*t.shape[:-1], t.shape[-1] + 3, dtype=t.dtype)
            padded[..., : t.shape[-1]] = t
            storage = torch.cat([torch.zeros(5, dtype=t.dtype), padded.flatten()])
            self.host = storage[5:].view(padded.shape)[..., : t.shape[-1]]
        else:
            storage = t.contiguous()
            self.host = storage
        self.buf = cann.upload(storage.flatten() if view != "offset" else storage)
        self.offset = self.host.storage_offset()
        self.desc = cann.tensor(
            self.buf, list(self.host.shape), list(self.host.stride()), self.offset
        )

    def result(self) -> torch.Tensor:
        """The view as the device holds it now (after a sync)."""
        storage = self.cann.download(self.buf)
        return storage.as_strided(self.host.shape, self.host.stride(), self.offset)


def out_arg(cann: Cann, shape, dtype, view="contiguous") -> Arg:
    return Arg(
        cann,
        torch.full(shape, float("nan")).to(dtype)
        if dtype.is_floating_point
        else torch.zeros(shape, dtype=dtype),
        view,
    )


VIEWS = ["contiguous", "transposed", "offset"]


def rand(shape, dtype, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
