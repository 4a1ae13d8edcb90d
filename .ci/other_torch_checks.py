"""polyops' guards under a torch other than the build's (no polyops._torch_ops).

.ci/run runs this in a venv whose torch differs from the one polyops was built
with: the fast functions then read the negative bit and autograd state through
torch's Python-level functions (docs/torch.md, "Torch versions"). Each case
must give the error the test suite checks under the build's torch
(tests/test_reliability.py). Exits non-zero on the first mismatch.
"""

from __future__ import annotations

import warnings

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)  # torch.ops.polyops not registered
    import polyops

x, y = torch.randn(4), torch.randn(4)


def raises(call, error: type[Exception], words: str) -> None:
    try:
        call()
    except error as caught:
        assert words in str(caught), (words, str(caught))
        return
    raise AssertionError(f"expected {error.__name__} with {words!r}")


def main() -> None:
    assert not polyops.torch_ops_registered(), "run this under another torch than the build's"
    raises(lambda: polyops.add(x._neg_view(), y), NotImplementedError, "negative or conjugate")
    raises(lambda: polyops.add(x.clone().requires_grad_(), y), NotImplementedError, "autograd")
    leaf = torch.zeros(4, requires_grad=True)
    raises(lambda: polyops.add(x, y, out=leaf), RuntimeError, "leaf tensor that requires grad")
    out = torch.empty(4)
    version = out._version
    polyops.add(x, y, out=out)
    assert out._version > version and torch.equal(out, x + y)
    with torch.inference_mode():
        inference = torch.empty(4)
        polyops.add(x, y, out=inference)
    raises(lambda: polyops.add(x, y, out=inference), RuntimeError, "inference tensor")
    fake = FakeTensorMode(allow_non_fake_inputs=True).from_tensor(x)
    raises(lambda: polyops.add(fake, y), NotImplementedError, "FakeTensor")
    storageless = x.clone()
    storageless.untyped_storage().resize_(0)
    raises(lambda: polyops.add(storageless, y), NotImplementedError, "storage holds no data")
    raises(lambda: polyops.add(x.to("meta"), y), NotImplementedError, "device 'meta'")
    raises(
        lambda: torch.vmap(lambda t: polyops.add(t, t))(torch.ones(2, 3)),
        NotImplementedError,
        "vmap batched tensor",
    )
    if "cuda" in polyops.devices():  # its device guard comes from polyops._torch_ops today
        cuda = torch.device("cuda")
        raises(lambda: polyops.add(x.to(cuda), y.to(cuda)), RuntimeError, "_torch_ops")
    assert polyops.rms_norm(torch.randn(2, 8), torch.ones(8), 1e-6).shape == (2, 8)
    print(f"polyops guards under torch {torch.__version__} (portable tensor reads): ok")


if __name__ == "__main__":
    main()
