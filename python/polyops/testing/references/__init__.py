"""Independent float64 references for every polyops operator, with their tolerances.

Each ``<op>_reference`` takes the op's own arguments (minus ``out``-style
outputs, ``implementation_index`` and ``stream``) and returns what the op
returns, computed in plain float64 torch from the math: never a call of the
polyops op, nor of the torch function the kernel mirrors (no
``F.scaled_dot_product_attention``, ``F.silu``, ``torch.softmax``, ``torch.cat``).
Inputs are the op's own low-precision tensors, upcast exactly to float64, so
the reference sees the rounded values the kernel sees. Float results come
back as float64 (unrounded); integer, bool and copied results come back in
their own dtype and are compared exactly.

A :class:`Tolerance` judges one result element: ``|actual - expected| <= atol
+ rtol * |expected|`` (NaN must meet NaN, an infinity the same infinity).
Every table says why its numbers are what they are. In the notation used
there, ``u`` is the unit roundoff of the result dtype, half an ulp
relative: 2**-11 (float16), 2**-8 (bfloat16), 2**-24 (float32), 2**-53 (float64).

The references live in one module per op family, the families of
:mod:`polyops.testing.opinfo`; the shared tolerance tables in
:mod:`~polyops.testing.references.tolerances`. Import them from here.
"""

from __future__ import annotations

from polyops.testing.references._common import Tensor
from polyops.testing.references.attention import (
    flash_attention_reference,
    paged_attention_reference,
)
from polyops.testing.references.elementwise import (
    ADD,
    add_alpha,
    add_reference,
    cast_reference,
    cat_reference,
    mul_reference,
)
from polyops.testing.references.gemm import gemm_reference, linear_reference, matmul_reference
from polyops.testing.references.kv_cache import reshape_and_cache_reference
from polyops.testing.references.rotary import (
    apply_rotary_pos_emb_reference,
    rotary_embedding_reference,
    rotate_reference,
)
from polyops.testing.references.rows import (
    add_rms_norm_reference,
    causal_softmax_reference,
    rms_norm_reference,
    silu_and_mul_reference,
    silu_reference,
    swiglu_reference,
)
from polyops.testing.references.sampling import (
    EXP_C1,
    EXP_C2,
    EXP_L,
    EXP_P,
    ONE_MINUS,
    SAMPLING_EPS,
    sampling_reference_row,
    sampling_token_plausible,
    spec_exp,
    splitmix_uniform,
    topk_topp_sampling_implausible_rows,
    topk_topp_sampling_reference,
)
from polyops.testing.references.tolerances import (
    ATTENTION,
    EXACT,
    FLOAT32_COMPUTE,
    PRODUCT,
    ROUNDED,
    UNIT_ROUNDOFF,
    Tolerance,
)

__all__ = [
    "ADD",
    "ATTENTION",
    "EXACT",
    "EXP_C1",
    "EXP_C2",
    "EXP_L",
    "EXP_P",
    "FLOAT32_COMPUTE",
    "ONE_MINUS",
    "PRODUCT",
    "ROUNDED",
    "SAMPLING_EPS",
    "UNIT_ROUNDOFF",
    "Tensor",
    "Tolerance",
    "add_alpha",
    "add_reference",
    "add_rms_norm_reference",
    "apply_rotary_pos_emb_reference",
    "cast_reference",
    "cat_reference",
    "causal_softmax_reference",
    "flash_attention_reference",
    "gemm_reference",
    "linear_reference",
    "matmul_reference",
    "mul_reference",
    "paged_attention_reference",
    "reshape_and_cache_reference",
    "rms_norm_reference",
    "rotary_embedding_reference",
    "rotate_reference",
    "sampling_reference_row",
    "sampling_token_plausible",
    "silu_and_mul_reference",
    "silu_reference",
    "spec_exp",
    "splitmix_uniform",
    "swiglu_reference",
    "topk_topp_sampling_implausible_rows",
    "topk_topp_sampling_reference",
]
