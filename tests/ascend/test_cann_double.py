"""The CANN test double (src/cann_double) driven through ctypes.

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
import subprocess
import sys
import textwrap

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


@pytest.fixture(scope="module")
def cann() -> Cann:
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


# --- elementwise ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("view", VIEWS)
def test_add_mul_broadcast(cann, dtype, view):
    a = rand((4, 6), dtype, seed=1)
    b = rand((6,), dtype, seed=2)
    xa, xb = Arg(cann, a, view), Arg(cann, b)
    out = out_arg(cann, (4, 6), dtype, view)
    alpha = cann.scalar(0.75)
    cann.run("aclnnAdd", xa.desc, xb.desc, alpha, out.desc)
    assert_close(out.result(), a.double() + 0.75 * b.double(), dtype)
    cann.run("aclnnMul", xa.desc, xb.desc, out.desc)
    assert_close(out.result(), a.double() * b.double(), dtype)


def test_add_integers_and_promotion(cann):
    a = torch.tensor([[1, -2, 3]], dtype=torch.int64) * (2**40)
    b = torch.tensor([[5], [7]], dtype=torch.int32)
    out = out_arg(cann, (2, 3), torch.int64)
    cann.run(
        "aclnnAdd", Arg(cann, a).desc, Arg(cann, b).desc, cann.scalar(3, torch.int64), out.desc
    )
    assert torch.equal(out.result(), a + 3 * b.to(torch.int64))
    # float16 + float32 promotes to float32.
    h, f = rand((3,), F16, seed=3), rand((3,), F32, seed=4)
    out = out_arg(cann, (3,), F32)
    cann.run("aclnnAdd", Arg(cann, h).desc, Arg(cann, f).desc, cann.scalar(1.0), out.desc)
    assert_close(out.result(), h.double() + f.double(), F32)
    # A fractional alpha cannot be converted to an integer result: 161002.
    xi = Arg(cann, torch.ones(3, dtype=torch.int32))
    msg = cann.expect_fail(PARAM_INVALID, "aclnnAdd", xi.desc, xi.desc, cann.scalar(0.5), xi.desc)
    assert "alpha" in msg
    # float result into an int output is refused; bad broadcast too.
    fo = Arg(cann, torch.ones(3, dtype=F32))
    cann.expect_fail(PARAM_INVALID, "aclnnAdd", fo.desc, fo.desc, cann.scalar(1.0), xi.desc)
    bad = Arg(cann, torch.ones(4, dtype=F32))
    cann.expect_fail(PARAM_INVALID, "aclnnMul", fo.desc, bad.desc, fo.desc)
    cann.expect_fail(NULLPTR, "aclnnMul", None, bad.desc, fo.desc)


@pytest.mark.parametrize("src", [F32, F16, BF16, torch.int32, torch.float64])
@pytest.mark.parametrize("dst", [F32, F16, BF16, torch.int64, torch.bool])
def test_cast(cann, src, dst):
    x = (rand((3, 5), torch.float64, scale=40, seed=5)).to(src)
    out = out_arg(cann, (3, 5), dst)
    cann.run("aclnnCast", Arg(cann, x, "transposed").desc, ACL_DTYPES[dst], out.desc)
    expected = x.double()
    if dst == torch.bool:
        assert torch.equal(out.result(), x != 0)
    elif not dst.is_floating_point:
        assert torch.equal(out.result(), expected.trunc().to(dst))
    else:
        assert torch.equal(out.result(), expected.to(dst))  # one rounding, to nearest even
    cann.expect_fail(
        PARAM_INVALID, "aclnnCast", Arg(cann, x).desc, 3 if dst != torch.int32 else 0, out.desc
    )


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(cann, dtype, dim):
    parts = [rand((3, 4, 2), dtype, seed=s) for s in range(3)]
    parts[1] = torch.cat([parts[1]] * 2, dim=dim)  # a different size along dim
    args = [Arg(cann, p, "offset" if i == 0 else "contiguous") for i, p in enumerate(parts)]
    expected = torch.cat(parts, dim=dim)
    out = out_arg(cann, expected.shape, dtype, "offset")
    cann.run("aclnnCat", cann.tensor_list([a.desc for a in args]), dim, out.desc)
    assert torch.equal(out.result(), expected)
    wrong = out_arg(cann, (1, 1, 1), dtype)
    lst = cann.tensor_list([Arg(cann, p).desc for p in parts])
    cann.expect_fail(PARAM_INVALID, "aclnnCat", lst, dim, wrong.desc)
    cann.expect_fail(PARAM_INVALID, "aclnnCat", lst, 3, out.desc)


# --- norms -----------------------------------------------------------------------


def rms_reference(x, gamma, eps, k):
    x = x.double()
    dims = tuple(range(x.dim() - k, x.dim()))
    rstd = torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps)
    return x * rstd * gamma.double(), rstd


@pytest.mark.parametrize(
    "dtype,gdtype", [(F16, F16), (BF16, BF16), (F32, F32), (F16, F32), (BF16, F32)]
)
@pytest.mark.parametrize("view", ["contiguous", "offset"])
def test_rms_norm(cann, dtype, gdtype, view):
    x = rand((2, 3, 16), dtype, seed=6)
    gamma = rand((16,), gdtype, seed=7) + 1
    y = out_arg(cann, x.shape, dtype, view)
    rstd = out_arg(cann, (2, 3, 1), F32)
    cann.run(
        "aclnnRmsNorm", Arg(cann, x, view).desc, Arg(cann, gamma).desc, 1e-6, y.desc, rstd.desc
    )
    ey, er = rms_reference(x, gamma, 1e-6, 1)
    assert_close(y.result(), ey, dtype)
    assert_close(rstd.result(), er, F32)
    # Two normalized dims: gamma (3, 16), rstd (2, 1, 1).
    gamma2 = rand((3, 16), gdtype, seed=8)
    rstd2 = out_arg(cann, (2, 1, 1), F32)
    cann.run("aclnnRmsNorm", Arg(cann, x).desc, Arg(cann, gamma2).desc, 1e-5, y.desc, rstd2.desc)
    ey, er = rms_reference(x, gamma2, 1e-5, 2)
    assert_close(y.result(), ey, dtype)
    assert_close(rstd2.result(), er, F32)


def test_rms_norm_rstd_is_mandatory_fp32_with_x_ndim(cann):
    x = Arg(cann, rand((2, 3, 8), F16))
    g = Arg(cann, rand((8,), F16))
    y = out_arg(cann, (2, 3, 8), F16)
    for shape, dtype in [((2, 3), F32), ((2, 3, 1), F16), ((6, 1), F32)]:
        bad = out_arg(cann, shape, dtype)
        assert "rstdOut" in cann.expect_fail(
            PARAM_INVALID, "aclnnRmsNorm", x.desc, g.desc, 1e-6, y.desc, bad.desc
        )
    cann.expect_fail(NULLPTR, "aclnnRmsNorm", x.desc, g.desc, 1e-6, y.desc, None)
    g32 = Arg(cann, rand((8,), F32))
    x32 = Arg(cann, rand((2, 3, 8), F32))
    y32 = out_arg(cann, (2, 3, 8), F32)
    rstd = out_arg(cann, (2, 3, 1), F32)
    cann.run("aclnnRmsNorm", x32.desc, g32.desc, 1e-6, y32.desc, rstd.desc)
    # float32 x with a float16 gamma is not a supported pair.
    g16 = Arg(cann, rand((8,), F16))
    cann.expect_fail(PARAM_INVALID, "aclnnRmsNorm", x32.desc, g16.desc, 1e-6, y32.desc, rstd.desc)


@pytest.mark.parametrize("dtype", FLOATS)
def test_add_rms_norm_and_inplace(cann, dtype):
    x1, x2 = rand((5, 32), dtype, seed=9), rand((5, 32), dtype, seed=10)
    gamma = rand((32,), dtype, seed=11)
    s = (x1.double() + x2.double()).to(dtype)  # the residual, rounded as stored
    ey, er = rms_reference(s, gamma, 1e-6, 1)
    y, rstd, xo = (
        out_arg(cann, (5, 32), dtype),
        out_arg(cann, (5, 1), F32),
        out_arg(cann, (5, 32), dtype),
    )
    a1, a2, g = Arg(cann, x1), Arg(cann, x2, "offset"), Arg(cann, gamma)
    cann.run("aclnnAddRmsNorm", a1.desc, a2.desc, g.desc, 1e-6, y.desc, rstd.desc, xo.desc)
    assert torch.equal(xo.result(), s)
    assert_close(y.result(), ey, dtype)
    assert_close(rstd.result(), er, F32)
    # In place: x1 <- normalized, x2 <- residual sum (vLLM fused_add_rms_norm).
    cann.run("aclnnInplaceAddRmsNorm", a1.desc, a2.desc, g.desc, 1e-6, rstd.desc)
    assert_close(a1.result(), ey, dtype)
    assert torch.equal(a2.result(), s)


# --- activations, softmax, masked fill, copy ---------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("view", ["contiguous", "offset"])
def test_swiglu_silu(cann, dtype, view):
    x = rand((3, 2, 16), dtype, scale=2, seed=12)
    xd = x.double()
    if view == "offset":
        # aclnnSwiGlu takes contiguous x and out only (padded rows are not).
        strided, plain = Arg(cann, x, view), Arg(cann, x)
        padded_out = out_arg(cann, (3, 2, 8), dtype, view)
        cann.expect_fail(
            PARAM_INVALID, "aclnnSwiGlu", strided.desc, -1, out_arg(cann, (3, 2, 8), dtype).desc
        )
        cann.expect_fail(PARAM_INVALID, "aclnnSwiGlu", plain.desc, -1, padded_out.desc)
    out = out_arg(cann, (3, 2, 8), dtype)
    cann.run("aclnnSwiGlu", Arg(cann, x).desc, -1, out.desc)
    assert_close(out.result(), torch.nn.functional.silu(xd[..., :8]) * xd[..., 8:], dtype)
    out0 = out_arg(cann, (3, 1, 16), dtype)
    cann.run("aclnnSwiGlu", Arg(cann, x).desc, 1, out0.desc)
    assert_close(out0.result(), torch.nn.functional.silu(xd[:, :1]) * xd[:, 1:], dtype)
    odd = Arg(cann, rand((3, 5), dtype))
    cann.expect_fail(PARAM_INVALID, "aclnnSwiGlu", odd.desc, -1, out.desc)
    so = out_arg(cann, x.shape, dtype, view)
    cann.run("aclnnSilu", Arg(cann, x, view).desc, so.desc)
    assert_close(so.result(), torch.nn.functional.silu(xd), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [-1, 0])
def test_softmax(cann, dtype, dim):
    x = rand((4, 7), dtype, scale=3, seed=13)
    out = out_arg(cann, (4, 7), dtype, "transposed")
    cann.run("aclnnSoftmax", Arg(cann, x, "offset").desc, dim, out.desc)
    assert_close(out.result(), torch.softmax(x.double(), dim), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_causal_softmax_sequence(cann, dtype):
    """IO's causal_softmax: copy, masked fill with -inf (end-aligned), softmax."""
    seq, total = 3, 5
    x = rand((2, seq, total), dtype, seed=14)
    work = out_arg(cann, x.shape, dtype)
    cann.run("aclnnInplaceCopy", work.desc, Arg(cann, x, "offset").desc)
    i = torch.arange(seq)[:, None]
    j = torch.arange(total)[None, :]
    mask = j > total - seq + i
    cann.run(
        "aclnnInplaceMaskedFillScalar", work.desc, Arg(cann, mask).desc, cann.scalar(float("-inf"))
    )
    out = out_arg(cann, x.shape, dtype)
    cann.run("aclnnSoftmax", work.desc, -1, out.desc)
    expected = torch.softmax(x.double().masked_fill(mask, float("-inf")), -1)
    assert_close(out.result(), expected, dtype)
    int_mask = Arg(cann, mask.to(torch.int8))
    cann.expect_fail(
        PARAM_INVALID, "aclnnInplaceMaskedFillScalar", work.desc, int_mask.desc, cann.scalar(0.0)
    )


def test_inplace_copy_casts_and_broadcasts(cann):
    dst = out_arg(cann, (3, 4), F16, "transposed")
    src = rand((4,), F32, seed=15)
    cann.run("aclnnInplaceCopy", dst.desc, Arg(cann, src).desc)
    assert torch.equal(dst.result(), src.to(F16).expand(3, 4))


# --- matrix products ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "va,vb", [("contiguous", "contiguous"), ("transposed", "offset"), ("offset", "transposed")]
)
def test_mm_matmul(cann, dtype, va, vb):
    a, b = rand((5, 12), dtype, seed=16), rand((12, 7), dtype, seed=17)
    out = out_arg(cann, (5, 7), dtype)
    expected = a.double() @ b.double()
    tol = dtype if dtype != F32 else torch.float64
    for op in ("aclnnMm", "aclnnMatmul"):
        cann.run(op, Arg(cann, a, va).desc, Arg(cann, b, vb).desc, out.desc, 0)
        assert_close(out.result(), expected, dtype if dtype != F32 else F32)
    del tol
    # Batched matmul with batch broadcasting and a 1-D operand.
    x, w = rand((2, 3, 4, 6), dtype, seed=18), rand((3, 6, 5), dtype, seed=19)
    out = out_arg(cann, (2, 3, 4, 5), dtype)
    cann.run("aclnnMatmul", Arg(cann, x).desc, Arg(cann, w, "transposed").desc, out.desc, 0)
    assert_close(out.result(), x.double() @ w.double(), dtype)
    v = rand((6,), dtype, seed=20)
    out = out_arg(cann, (2, 3, 4), dtype)
    cann.run("aclnnMatmul", Arg(cann, x).desc, Arg(cann, v).desc, out.desc, 0)
    assert_close(out.result(), x.double() @ v.double(), dtype)
    bad = Arg(cann, rand((5, 5), dtype))
    cann.expect_fail(PARAM_INVALID, "aclnnMm", bad.desc, Arg(cann, b).desc, out.desc, 0)


def test_matmul_cube_math_type(cann):
    # Mantissas with more than 10 significant bits: HF32 (cubeMathType 1) rounds them.
    a = torch.full((2, 2), 1 + 2**-12, dtype=F32)
    b = torch.eye(2, dtype=F32)
    out = out_arg(cann, (2, 2), F32)
    cann.run("aclnnMm", Arg(cann, a).desc, Arg(cann, b).desc, out.desc, 0)
    assert torch.equal(out.result(), a)  # KEEP_DTYPE is fp32-exact
    cann.run("aclnnMm", Arg(cann, a).desc, Arg(cann, b).desc, out.desc, 1)
    assert torch.equal(out.result(), torch.ones(2, 2))
    bf = Arg(cann, a.to(BF16))
    bout = out_arg(cann, (2, 2), BF16)
    cann.expect_fail(PARAM_INVALID, "aclnnMm", bf.desc, bf.desc, bout.desc, 2)
    cann.expect_fail(PARAM_INVALID, "aclnnMm", bf.desc, bf.desc, bout.desc, 7)


@pytest.mark.parametrize("dtype", FLOATS)
def test_addmm_baddbmm(cann, dtype):
    bias, m1, m2 = (
        rand((7,), dtype, seed=21),
        rand((5, 9), dtype, seed=22),
        rand((9, 7), dtype, seed=23),
    )
    out = out_arg(cann, (5, 7), dtype)
    beta, alpha = cann.scalar(0.5), cann.scalar(2.0)
    cann.run(
        "aclnnAddmm",
        Arg(cann, bias).desc,
        Arg(cann, m1, "transposed").desc,
        Arg(cann, m2).desc,
        beta,
        alpha,
        out.desc,
        0,
    )
    assert_close(out.result(), 0.5 * bias.double() + 2.0 * (m1.double() @ m2.double()), dtype)
    b3, b1, b2 = (
        rand((3, 1, 4), dtype, seed=24),
        rand((3, 2, 6), dtype, seed=25),
        rand((3, 6, 4), dtype, seed=26),
    )
    out = out_arg(cann, (3, 2, 4), dtype)
    cann.run(
        "aclnnBaddbmm",
        Arg(cann, b3).desc,
        Arg(cann, b1).desc,
        Arg(cann, b2, "transposed").desc,
        cann.scalar(-1.0),
        cann.scalar(0.25),
        out.desc,
        0,
    )
    assert_close(out.result(), -b3.double() + 0.25 * (b1.double() @ b2.double()), dtype)
    # beta = 0 ignores self, even NaN.
    nan_bias = Arg(cann, torch.full((5, 7), float("nan"), dtype=dtype))
    out = out_arg(cann, (5, 7), dtype)
    cann.run(
        "aclnnAddmm",
        nan_bias.desc,
        Arg(cann, m1).desc,
        Arg(cann, m2).desc,
        cann.scalar(0.0),
        cann.scalar(1.0),
        out.desc,
        0,
    )
    assert_close(out.result(), m1.double() @ m2.double(), dtype)


# --- RoPE ---------------------------------------------------------------------------


def rope_reference(positions, x, cache, head_size, neox):
    tokens = x.shape[0]
    xd = x.double().view(tokens, -1, head_size)
    rot = cache.shape[1]
    c = cache.double()[positions]
    cos, sin = c[:, None, : rot // 2], c[:, None, rot // 2 :]
    r = xd[..., :rot]
    if neox:
        x1, x2 = r[..., : rot // 2], r[..., rot // 2 :]
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    else:
        x1, x2 = r[..., 0::2], r[..., 1::2]
        out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(-2)
    return torch.cat([out, xd[..., rot:]], -1).view(tokens, -1)


@pytest.mark.parametrize("dtype,head,rot", [(F16, 64, 32), (BF16, 64, 64), (F32, 48, 16)])
@pytest.mark.parametrize("neox", [True, False])
def test_rope_with_sin_cos_cache(cann, dtype, head, rot, neox):
    tokens, nq, nk, max_pos = 5, 4, 2, 16
    positions = torch.tensor([3, 0, 15, 7, 7])
    q, k = rand((tokens, nq * head), dtype, seed=30), rand((tokens, nk * head), dtype, seed=31)
    cache = rand((max_pos, rot), dtype, seed=32)
    qo, ko = out_arg(cann, q.shape, dtype, "offset"), out_arg(cann, k.shape, dtype)
    cann.run(
        "aclnnRopeWithSinCosCache",
        Arg(cann, positions).desc,
        Arg(cann, q, "offset").desc,
        Arg(cann, k).desc,
        Arg(cann, cache).desc,
        None,
        head,
        neox,
        qo.desc,
        ko.desc,
    )
    assert_close(qo.result(), rope_reference(positions, q, cache, head, neox), dtype)
    assert_close(ko.result(), rope_reference(positions, k, cache, head, neox), dtype)


def test_rope_with_sin_cos_cache_validation(cann):
    pos = Arg(cann, torch.zeros(2, dtype=torch.int64))
    q = Arg(cann, rand((2, 96), F16))
    cache = Arg(cann, rand((4, 48), F16))
    out = out_arg(cann, (2, 96), F16)
    # 48 is not a multiple of 32 for float16.
    msg = cann.expect_fail(
        PARAM_INVALID,
        "aclnnRopeWithSinCosCache",
        pos.desc,
        q.desc,
        q.desc,
        cache.desc,
        None,
        48,
        True,
        out.desc,
        out.desc,
    )
    assert "multiples of 32" in msg
    q3 = Arg(cann, rand((2, 3, 32), F16))
    c32 = Arg(cann, rand((4, 32), F16))
    cann.expect_fail(
        PARAM_INVALID,
        "aclnnRopeWithSinCosCache",
        pos.desc,
        q3.desc,
        q3.desc,
        c32.desc,
        None,
        32,
        True,
        out.desc,
        out.desc,
    )
    # A position past the cache is a run-time fault reported by the sync.
    bad_pos = Arg(cann, torch.tensor([0, 9]))
    q64 = Arg(cann, rand((2, 64), F16))
    out64 = out_arg(cann, (2, 64), F16)
    status, ws, ex = cann.phase_one(
        "aclnnRopeWithSinCosCache",
        bad_pos.desc,
        q64.desc,
        q64.desc,
        c32.desc,
        None,
        32,
        True,
        out64.desc,
        out64.desc,
    )
    assert status == 0
    assert cann.launch("aclnnRopeWithSinCosCache", ws, ex) == 0
    assert cann.sync_stream(None) == 507899
    assert "position 9" in cann.error()


def rotate_reference(x, cos, sin, mode):
    x, cos, sin = x.double(), cos.double(), sin.double()
    if mode == "half":
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    else:
        rotated = torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2)
    return x * cos + rotated * sin


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_apply_rotary_pos_emb_v2(cann, dtype, mode):
    tokens, d = 3, 128
    q, k = rand((tokens, 4, d), dtype, seed=33), rand((tokens, 2, d), dtype, seed=34)
    cos, sin = rand((tokens, 1, d), dtype, seed=35), rand((tokens, 1, d), dtype, seed=36)
    aq, ak = Arg(cann, q), Arg(cann, k, "offset")
    cann.run(
        "aclnnApplyRotaryPosEmbV2",
        aq.desc,
        ak.desc,
        Arg(cann, cos).desc,
        Arg(cann, sin).desc,
        4,
        mode.encode(),
    )
    assert_close(aq.result(), rotate_reference(q, cos, sin, mode), dtype)
    assert_close(ak.result(), rotate_reference(k, cos, sin, mode), dtype)
    # BSND (layout 1) with cos [B, S, 1, D].
    q4 = rand((2, 3, 4, d), dtype, seed=37)
    c4, s4 = rand((2, 3, 1, d), dtype, seed=38), rand((2, 3, 1, d), dtype, seed=39)
    a4 = Arg(cann, q4)
    cann.run(
        "aclnnApplyRotaryPosEmbV2",
        a4.desc,
        a4.desc,
        Arg(cann, c4).desc,
        Arg(cann, s4).desc,
        1,
        mode.encode(),
    )
    # query and key alias here: rotated twice.
    twice = rotate_reference(rotate_reference(q4, c4, s4, mode).to(dtype), c4, s4, mode)
    assert_close(a4.result(), twice, dtype)


def test_apply_rotary_pos_emb_v2_validation(cann):
    q = Arg(cann, rand((3, 2, 64), F16))
    c = Arg(cann, rand((3, 1, 64), F16))
    assert "128" in cann.expect_fail(
        PARAM_INVALID, "aclnnApplyRotaryPosEmbV2", q.desc, q.desc, c.desc, c.desc, 4, b"half"
    )
    q = Arg(cann, rand((3, 2, 128), F16))
    c = Arg(cann, rand((3, 1, 128), F16))
    cann.expect_fail(
        PARAM_INVALID, "aclnnApplyRotaryPosEmbV2", q.desc, q.desc, c.desc, c.desc, 4, b"quarter"
    )
    cann.expect_fail(
        PARAM_INVALID, "aclnnApplyRotaryPosEmbV2", q.desc, q.desc, c.desc, c.desc, 1, b"half"
    )


# --- KV cache --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F16, BF16, torch.int8])
@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
def test_scatter_pa_kv_cache(cann, dtype, slot_dtype):
    blocks, block_size, nkv, d, dv = 3, 4, 2, 16, 8
    key = (rand((5, nkv, d), torch.float64, scale=20, seed=40)).to(dtype)
    value = (rand((5, nkv, dv), torch.float64, scale=20, seed=41)).to(dtype)
    slots = torch.tensor([0, 5, -1, 11, 6], dtype=slot_dtype)
    kc = Arg(cann, torch.zeros(blocks, block_size, nkv, d, dtype=dtype))
    vc = Arg(cann, torch.zeros(blocks, block_size, nkv, dv, dtype=dtype))
    strides, offsets = cann.int_array([1, 1]), cann.int_array([0, 0])
    cann.run(
        "aclnnScatterPaKvCache",
        Arg(cann, key).desc,
        kc.desc,
        Arg(cann, slots).desc,
        Arg(cann, value).desc,
        vc.desc,
        None,
        None,
        None,
        b"Norm",
        b"None",
        strides,
        offsets,
    )
    ek = torch.zeros(blocks * block_size, nkv, d, dtype=dtype)
    ev = torch.zeros(blocks * block_size, nkv, dv, dtype=dtype)
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            ek[s], ev[s] = key[t], value[t]
    assert torch.equal(kc.result(), ek.view(blocks, block_size, nkv, d))
    assert torch.equal(vc.result(), ev.view(blocks, block_size, nkv, dv))


def test_scatter_pa_kv_cache_validation(cann):
    key32 = Arg(cann, rand((2, 1, 16), F32))
    kc32 = Arg(cann, torch.zeros(2, 2, 1, 16))
    slots = Arg(cann, torch.tensor([0, 1], dtype=torch.int32))
    args = (None, None, None, b"Norm", b"None", None, None)
    msg = cann.expect_fail(
        PARAM_INVALID,
        "aclnnScatterPaKvCache",
        key32.desc,
        kc32.desc,
        slots.desc,
        key32.desc,
        kc32.desc,
        *args,
    )
    assert "FLOAT16" in msg
    key = Arg(cann, rand((2, 1, 16), F16), "offset")  # padded rows: not contiguous
    kc = Arg(cann, torch.zeros(2, 2, 1, 16, dtype=F16))
    assert "contiguous" in cann.expect_fail(
        PARAM_INVALID,
        "aclnnScatterPaKvCache",
        key.desc,
        kc.desc,
        slots.desc,
        key.desc,
        kc.desc,
        *args,
    )
    # 8.3.RC1.alpha003 modes are refused; an out-of-range slot faults at the sync.
    good = Arg(cann, rand((2, 1, 16), F16))
    cann.expect_fail(
        PARAM_INVALID,
        "aclnnScatterPaKvCache",
        good.desc,
        kc.desc,
        slots.desc,
        good.desc,
        kc.desc,
        None,
        None,
        None,
        b"PA_NZ",
        b"None",
        None,
        None,
    )
    far = Arg(cann, torch.tensor([0, 4], dtype=torch.int32))
    status, ws, ex = cann.phase_one(
        "aclnnScatterPaKvCache", good.desc, kc.desc, far.desc, good.desc, kc.desc, *args
    )
    assert status == 0 and cann.launch("aclnnScatterPaKvCache", ws, ex) == 0
    assert cann.sync_device() == 507899
    assert "slotMapping[1] = 4" in cann.error()


# --- sampling ------------------------------------------------------------------------------


def top_k_top_p_reference(logits, p, k):
    """vLLM's apply_top_k_top_p in float64 (ascending sort, p before k in the aclnn call)."""
    x = logits.double()
    vocab = x.shape[1]
    order = torch.sort(x, dim=-1, stable=True).indices
    xs = x.gather(1, order)
    if k is not None:
        kk = k.long().clone()
        kk[(kk <= 0) | (kk >= vocab)] = vocab
        threshold = xs.gather(1, (vocab - kk)[:, None])
        xs = xs.masked_fill(xs < threshold, float("-inf"))
    if p is not None:
        probs = xs.softmax(-1).cumsum(-1)
        mask = probs <= 1 - p.double()[:, None]
        mask[:, -1] = False
        xs = xs.masked_fill(mask, float("-inf"))
    return torch.empty_like(xs).scatter_(1, order, xs)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("which", ["both", "p", "k"])
def test_apply_top_k_top_p(cann, dtype, which):
    rows, vocab = 4, 50
    logits = torch.randperm(rows * vocab, generator=torch.Generator().manual_seed(42))
    logits = (logits.double().view(rows, vocab) / 40).to(dtype)  # distinct values
    p = torch.tensor([0.9, 0.5, 1.0, 0.2], dtype=dtype) if which != "k" else None
    k = torch.tensor([5, 0, 50, 20], dtype=torch.int32) if which != "p" else None
    out = out_arg(cann, (rows, vocab), dtype)
    cann.run(
        "aclnnApplyTopKTopP",
        Arg(cann, logits).desc,
        Arg(cann, p).desc if p is not None else None,
        Arg(cann, k).desc if k is not None else None,
        out.desc,
    )
    expected = top_k_top_p_reference(logits, p, k)
    assert torch.equal(out.result().isinf(), expected.isinf())
    assert_close(out.result(), expected, dtype)


def test_apply_top_k_top_p_validation(cann):
    logits = Arg(cann, rand((2, 8), F16))
    p32 = Arg(cann, torch.tensor([0.5, 0.5]))  # float32 p with float16 logits
    k64 = Arg(cann, torch.tensor([1, 2]))  # int64 k
    out = out_arg(cann, (2, 8), F16)
    cann.expect_fail(PARAM_INVALID, "aclnnApplyTopKTopP", logits.desc, p32.desc, None, out.desc)
    cann.expect_fail(PARAM_INVALID, "aclnnApplyTopKTopP", logits.desc, None, k64.desc, out.desc)
    cann.expect_fail(NULLPTR, "aclnnApplyTopKTopP", logits.desc, None, None, out.desc)


# --- attention --------------------------------------------------------------------------


def attention_reference(q, k, v, q_lens, kv_lens, scale, mode=0, pre=0, nxt=0):
    """Per request: q [Sq, N, D], k/v [Skv, Nkv, D]; bottom-right aligned masks.

    sparseMode 4 (band): query i sees keys [diag - pre, diag + nxt] with diag = i + Skv - Sq.
    Returns the output [T, N, Dv] and the log-sum-exp [T, N, 1] (-inf for a query that sees no
    key, whose output is 0).
    """
    outs, lses = [], []
    q_start = kv_start = 0
    for sq, skv in zip(q_lens, kv_lens, strict=True):
        qr = q[q_start : q_start + sq].double()
        kr = k[kv_start : kv_start + skv].double()
        vr = v[kv_start : kv_start + skv].double()
        q_start, kv_start = q_start + sq, kv_start + skv
        group = qr.shape[1] // kr.shape[1]
        kr, vr = kr.repeat_interleave(group, 1), vr.repeat_interleave(group, 1)
        scores = torch.einsum("qhd,khd->hqk", qr, kr) * scale
        i = torch.arange(sq)[:, None]
        j = torch.arange(skv)[None, :]
        diag = i + skv - sq
        visible = torch.ones(sq, skv, dtype=torch.bool)
        if mode == 3:
            visible = j <= diag
        elif mode == 4:
            visible = (j >= diag - pre) & (j <= diag + nxt)
        scores = scores.masked_fill(~visible, float("-inf"))
        lse = torch.logsumexp(scores, -1)  # [h, q]
        probs = torch.nan_to_num(torch.exp(scores - lse[..., None]), nan=0.0)
        outs.append(torch.einsum("hqk,khd->qhd", probs, vr))
        lses.append(lse.transpose(0, 1)[..., None])
    return torch.cat(outs), torch.cat(lses)


@pytest.fixture(scope="module")
def causal_mask(cann):
    return Arg(cann, torch.ones(2048, 2048, dtype=torch.bool).triu(1))


def fia(
    cann,
    q,
    key_desc,
    value_desc,
    mask,
    q_ends,
    kv_values,
    heads,
    kv_heads,
    scale,
    pre,
    nxt,
    mode,
    block_table=None,
    block_size=0,
    out=None,
    lse=None,
):
    """aclnnFusedInferAttentionScoreV3 phase 1 with TND and the unused optionals NULL."""
    args = [
        q,
        cann.tensor_list([key_desc]),
        cann.tensor_list([value_desc]),
        None,
        mask,
        cann.int_array(q_ends),
        cann.int_array(kv_values),
    ] + [None] * 7
    args += [block_table] + [None] * 12
    args += [heads, scale, pre, nxt, b"TND", kv_heads, mode, 0, block_size, 0, lse is not None]
    args += [0, 0, out, lse]
    return cann.phase_one("aclnnFusedInferAttentionScoreV3", *args)


def launch_and_sync(cann, name, status_ws_ex):
    status, ws, ex = status_ws_ex
    assert status == 0, cann.error()
    assert cann.launch(name, ws, ex) == 0, cann.error()
    assert cann.sync_stream(None) == 0, cann.error()


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("mode,pre,nxt", [(0, 0, 0), (3, 0, 0), (4, 2, 0), (4, 1, 1)])
def test_fia_v3_tnd(cann, causal_mask, dtype, mode, pre, nxt):
    heads, kv_heads, d = 4, 2, 16
    q_lens, kv_lens = [3, 1, 4], [5, 2, 4]
    q = rand((sum(q_lens), heads, d), dtype, seed=50)
    k = rand((sum(kv_lens), kv_heads, d), dtype, seed=51)
    v = rand((sum(kv_lens), kv_heads, d), dtype, seed=52)
    out = out_arg(cann, q.shape, dtype)
    lse = out_arg(cann, (sum(q_lens), heads, 1), F32)
    q_ends = torch.tensor(q_lens).cumsum(0).tolist()
    kv_ends = torch.tensor(kv_lens).cumsum(0).tolist()
    scale = d**-0.5
    result = fia(
        cann,
        Arg(cann, q).desc,
        Arg(cann, k).desc,
        Arg(cann, v).desc,
        causal_mask.desc if mode else None,
        q_ends,
        kv_ends,
        heads,
        kv_heads,
        scale,
        pre,
        nxt,
        mode,
        out=out.desc,
        lse=lse.desc,
    )
    launch_and_sync(cann, "aclnnFusedInferAttentionScoreV3", result)
    eo, el = attention_reference(q, k, v, q_lens, kv_lens, scale, mode, pre, nxt)
    assert_close(out.result(), eo, dtype)
    assert_close(lse.result(), el, F32 if dtype == F16 else BF16)


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("cache_layout", ["BSH", "BNSD"])
def test_fia_v3_paged(cann, causal_mask, dtype, cache_layout):
    heads, kv_heads, d, block_size, blocks = 4, 1, 16, 4, 8
    q_lens, kv_lens = [2, 3], [7, 3]
    k = rand((sum(kv_lens), kv_heads, d), dtype, seed=53)
    v = rand((sum(kv_lens), kv_heads, d), dtype, seed=54)
    q = rand((sum(q_lens), heads, d), dtype, seed=55)
    # Request 0 in blocks 5, 2; request 1 in block 6.
    table = torch.tensor([[5, 2], [6, 0]], dtype=torch.int32)
    kc = torch.zeros(blocks, block_size, kv_heads, d, dtype=dtype)
    vc = torch.zeros_like(kc)
    start = 0
    for r, n in enumerate(kv_lens):
        for j in range(n):
            kc[table[r, j // block_size], j % block_size] = k[start + j]
            vc[table[r, j // block_size], j % block_size] = v[start + j]
        start += n
    if cache_layout == "BSH":
        kc, vc = (
            kc.view(blocks, block_size, kv_heads * d),
            vc.view(blocks, block_size, kv_heads * d),
        )
    else:
        kc, vc = kc.transpose(1, 2).contiguous(), vc.transpose(1, 2).contiguous()
    out = out_arg(cann, q.shape, dtype)
    scale = 0.3
    result = fia(
        cann,
        Arg(cann, q).desc,
        Arg(cann, kc).desc,
        Arg(cann, vc).desc,
        causal_mask.desc,
        torch.tensor(q_lens).cumsum(0).tolist(),
        kv_lens,
        heads,
        kv_heads,
        scale,
        0,
        0,
        3,
        Arg(cann, table).desc,
        block_size,
        out.desc,
    )
    launch_and_sync(cann, "aclnnFusedInferAttentionScoreV3", result)
    eo, _ = attention_reference(q, k, v, q_lens, kv_lens, scale, 3)
    assert_close(out.result(), eo, dtype)


def test_fia_v3_bookkeeping_errors(cann, causal_mask):
    heads, d = 2, 16
    q = Arg(cann, rand((4, heads, d), F16))
    k = Arg(cann, rand((6, heads, d), F16))
    out = out_arg(cann, (4, heads, d), F16)
    common = (heads, heads, 0.25, 0, 0)
    # Sum of query lengths != T, kv lengths count != batch: 561002 (trap 7).
    st, _, _ = fia(cann, q.desc, k.desc, k.desc, None, [1, 3], [2, 6], *common, 0, out=out.desc)
    assert st == TILING, cann.error()
    st, _, _ = fia(cann, q.desc, k.desc, k.desc, None, [1, 4], [6], *common, 0, out=out.desc)
    assert st == TILING, cann.error()
    # numHeads % numKeyValueHeads != 0; sparseMode 3 without the mask; softmaxLse missing.
    st, _, _ = fia(
        cann, q.desc, k.desc, k.desc, None, [1, 4], [2, 6], heads, 3, 0.25, 0, 0, 0, out=out.desc
    )
    assert st == PARAM_INVALID
    st, _, _ = fia(cann, q.desc, k.desc, k.desc, None, [1, 4], [2, 6], *common, 3, out=out.desc)
    assert st == PARAM_INVALID
    # Paged: block table rows != batch.
    cache = Arg(cann, rand((3, 4, heads * d), F16))
    table = Arg(cann, torch.zeros(3, 2, dtype=torch.int32))
    st, _, _ = fia(
        cann,
        q.desc,
        cache.desc,
        cache.desc,
        None,
        [1, 4],
        [2, 6],
        *common,
        0,
        block_table=table.desc,
        block_size=4,
        out=out.desc,
    )
    assert st == TILING, cann.error()
    # A mask that is not triu(1) faults when the op runs.
    wrong = Arg(cann, torch.zeros(2048, 2048, dtype=torch.bool))
    st, ws, ex = fia(
        cann, q.desc, k.desc, k.desc, wrong.desc, [1, 4], [2, 6], *common, 3, out=out.desc
    )
    assert st == 0 and cann.launch("aclnnFusedInferAttentionScoreV3", ws, ex) == 0
    assert cann.sync_stream(None) == 507899
    assert "triu" in cann.error()


def ifa(
    cann, q, key_desc, value_desc, lens, table, heads, kv_heads, scale, layout, block_size, out
):
    args = [
        q,
        cann.tensor_list([key_desc]),
        cann.tensor_list([value_desc]),
        None,
        None,
        cann.int_array(lens) if lens is not None else None,
    ] + [None] * 7
    args += [table, None, heads, scale, layout, kv_heads, block_size, 0, out]
    return cann.phase_one("aclnnIncreFlashAttentionV4", *args)


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_ifa_v4_paged_decode(cann, dtype):
    batch, heads, kv_heads, d, block_size, blocks = 3, 4, 2, 16, 2, 6
    lens = [3, 1, 4]
    k = rand((sum(lens), kv_heads, d), dtype, seed=60)
    v = rand((sum(lens), kv_heads, d), dtype, seed=61)
    q = rand((batch, 1, heads * d), dtype, seed=62)
    table = torch.tensor([[4, 1], [0, 0], [2, 5]], dtype=torch.int32)
    kc = torch.zeros(blocks, block_size, kv_heads, d, dtype=dtype)
    vc = torch.zeros_like(kc)
    start = 0
    for r, n in enumerate(lens):
        for j in range(n):
            kc[table[r, j // block_size], j % block_size] = k[start + j]
            vc[table[r, j // block_size], j % block_size] = v[start + j]
        start += n
    flat = (blocks, block_size, kv_heads * d)
    out = out_arg(cann, q.shape, dtype)
    result = ifa(
        cann,
        Arg(cann, q).desc,
        Arg(cann, kc.view(flat)).desc,
        Arg(cann, vc.view(flat)).desc,
        lens,
        Arg(cann, table).desc,
        heads,
        kv_heads,
        0.5,
        b"BSH",
        block_size,
        out.desc,
    )
    launch_and_sync(cann, "aclnnIncreFlashAttentionV4", result)
    eo, _ = attention_reference(q.view(batch, heads, d), k, v, [1] * batch, lens, 0.5)
    assert_close(out.result(), eo.reshape(q.shape), dtype)


def test_ifa_v4_contiguous_bnsd(cann):
    batch, heads, d, seq = 2, 2, 16, 5
    q = rand((batch, heads, 1, d), F16, seed=63)
    k, v = rand((batch, heads, seq, d), F16, seed=64), rand((batch, heads, seq, d), F16, seed=65)
    out = out_arg(cann, q.shape, F16)
    result = ifa(
        cann,
        Arg(cann, q).desc,
        Arg(cann, k).desc,
        Arg(cann, v).desc,
        [5, 3],
        None,
        heads,
        heads,
        0.25,
        b"BNSD",
        0,
        out.desc,
    )
    launch_and_sync(cann, "aclnnIncreFlashAttentionV4", result)
    kt, vt = k.transpose(1, 2), v.transpose(1, 2)  # [B, S, N, D]
    keys = torch.cat([kt[0, :5], kt[1, :3]])
    values = torch.cat([vt[0, :5], vt[1, :3]])
    eo, _ = attention_reference(q.view(batch, heads, d), keys, values, [1, 1], [5, 3], 0.25)
    assert_close(out.result(), eo.view(batch, heads, 1, d), F16)


# --- runtime strictness -------------------------------------------------------------------


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
import test_cann_double as t
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
