#!/usr/bin/env bash
# The CUDA backend's checks on a GPU machine, in phases that each fit one
# call of a lent machine (docs/cuda.md, "Validating on a GPU"):
#   scripts/gpu_validate.sh build   install carried wheels, build polyops
#                                   against the machine's torch (FlashInfer
#                                   from third_party/flashinfer)
#   scripts/gpu_validate.sh test    the CUDA tests and the parity suite
#   scripts/gpu_validate.sh bench   the CUDA benchmarks (JSON + tables)
# Logs and JSON go to $OUT (default /tmp/polyops-gpu). Wheels the machine
# lacks (scipy-openblas32, scikit-build-core>=1.1) travel in .whl/.
set -uo pipefail
OUT=${OUT:-/tmp/polyops-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi

case "${1:-}" in
  build)
    nvidia-smi -L | tee "$OUT/gpu.txt"
    include=third_party/flashinfer/include
    flashinfer=(-C cmake.define.POLYOPS_FLASHINFER=ON
                -C "cmake.define.POLYOPS_FLASHINFER_INCLUDE_DIR=$PWD/$include")
    [[ -d $include ]] || flashinfer=(-C cmake.define.POLYOPS_FLASHINFER=OFF)
    # -C build-dir keeps the objects between calls on a warm machine.
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install -v \
      --no-build-isolation --no-deps -C build-dir=/tmp/polyops-build \
      -C cmake.define.WITH_CUDA=ON "${flashinfer[@]}" . \
      >"$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 1; }
    (cd /tmp && python3 -m polyops) | tee "$OUT/polyops.txt"
    ;;
  test)
    python3 -m pytest -q -rs --timeout 300 -p no:cacheprovider \
      tests/test_cuda.py tests/test_cuda_rows.py tests/test_cuda_ops.py \
      tests/test_cuda_attention.py tests/test_fallback.py tests/test_parity.py \
      tests/test_silu_vllm.py tests/test_integrations_vllm.py \
      --junitxml "$OUT/junit.xml" 2>&1 | tee "$OUT/tests.log"
    (cd /tmp && python3 -m polyops parity --device cuda --json "$OUT/parity.json") \
      >"$OUT/parity.txt" 2>&1
    tail -5 "$OUT/parity.txt"
    ;;
  bench)
    python3 benchmarks/cuda_rows.py --json "$OUT/cuda_rows.json"
    python3 benchmarks/cuda_ops.py --json "$OUT/cuda_ops.json"
    python3 benchmarks/attention.py --device cuda --implementation-index 0,1 \
      --prefill 4x2048 --prefill-kv-heads 8 --decode 64x2048 --dtypes bf16 \
      --json "$OUT/attention.json"
    python3 benchmarks/host_overhead.py --device cuda --json "$OUT/host.json"
    ;;
  *)
    echo "usage: $0 build|test|bench" >&2
    exit 2
    ;;
esac
