#!/usr/bin/env bash
# The CUDA backend's checks on a GPU machine, in phases that each fit one
# call of a lent machine (docs/backends/cuda.md, "Validating on a GPU"):
#   scripts/gpu_validate.sh build   install carried wheels, build polyops
#                                   against the machine's torch (FlashInfer
#                                   from third_party/flashinfer)
#   scripts/gpu_validate.sh test    the CUDA tests and the parity suite
#   scripts/gpu_validate.sh bench   the CUDA benchmarks (JSON + tables)
#   scripts/gpu_validate.sh cpu     the CPU matrix products on the machine's
#                                   own CPU (AMX where it has it), after build
#   scripts/gpu_validate.sh isa     the CPU kernels' ISA variants on that CPU
#                                   (AVX-512 where it has it), after build
# Logs and JSON go to $OUT (default /tmp/polyops-gpu). Wheels the machine
# lacks (scipy-openblas32, scikit-build-core>=1.1, and for `cpu` oneDNN's
# onednn-cpu-gomp and onednn-devel-cpu-gomp) travel in .whl/.
set -uo pipefail
OUT=${OUT:-/tmp/polyops-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
shopt -s nullglob
wheels=() onednn_wheels=()
for wheel in .whl/*.whl; do
  case "$(basename "$wheel")" in
    onednn*) onednn_wheels+=("$wheel") ;;
    *) wheels+=("$wheel") ;;
  esac
done
if ((${#wheels[@]})); then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site "${wheels[@]}" || exit 1
  export PYTHONPATH=/tmp/site
fi
# oneDNN's wheels keep their headers and library outside site-packages,
# which pip --target drops: unpacked instead, the headers passed to CMake
# and the library found through the loader's path.
onednn=()
for wheel in "${onednn_wheels[@]}"; do
  python3 -m zipfile -e "$wheel" /tmp/onednn || exit 1
done
for data in /tmp/onednn/*.data/data; do
  [[ -f $data/include/oneapi/dnnl/dnnl.h ]] &&
    onednn=(-C "cmake.define.POLYOPS_ONEDNN_INCLUDE_DIR=$data/include")
  [[ -e $data/lib/libdnnl.so.3 ]] &&
    export LD_LIBRARY_PATH=$data/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
done

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
      -C cmake.define.WITH_CUDA=ON "${flashinfer[@]}" "${onednn[@]}" . \
      >"$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 1; }
    (cd /tmp && python3 -m polyops) | tee "$OUT/polyops.txt"
    ;;
  test)
    python3 -m pytest -q -rs --timeout 300 -p no:cacheprovider \
      tests/cuda/test_cuda.py tests/cuda/test_cuda_rows.py \
      tests/cuda/test_cuda_ops.py tests/cuda/test_cuda_attention.py \
      tests/generic/test_fallback.py tests/generic/test_parity.py \
      tests/cpu/test_silu_vllm.py tests/integrations/test_integrations_vllm.py \
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
  cpu)
    # The development CPUs have no AMX; a GPU host often has (Sapphire
    # Rapids and later). The oneDNN path's tests, then the products at the
    # shapes of docs/backends/cpu_gemm.md against torch, on 2 threads as there.
    lscpu >"$OUT/lscpu.txt"
    grep -o -w -E 'avx512f|avx512_bf16|amx_tile|amx_bf16' /proc/cpuinfo |
      sort -u | tr '\n' ' ' | tee "$OUT/cpu_flags.txt"
    echo
    (cd /tmp && python3 -c 'import polyops; print(polyops._C._onednn_info())') |
      tee "$OUT/onednn.txt"
    python3 -m pytest -q -rs -p no:cacheprovider tests/generic/test_gemm.py \
      tests/generic/test_gemm_own_kernels.py \
      tests/cpu/test_gemm_onednn.py --junitxml "$OUT/cpu_junit.xml" \
      >"$OUT/cpu_tests.log" 2>&1
    tail -3 "$OUT/cpu_tests.log"
    # Bounded runs, each with its own JSON: the decode and square rows, then
    # the Llama MLP shape in bfloat16 (what AMX changes) and in float32
    # (seconds per call). A stopped run is reported, not passed on as this
    # script's exit status (124 would read as the device call's own limit).
    gemm() {
      local seconds=$1 name=$2
      shift 2
      timeout "$seconds" python3 benchmarks/gemm.py --threads 2 \
        --paths own,auto --repeats 3 --json "$OUT/$name.json" "$@" 2>&1 ||
        echo "gemm.py $*: exit $? (124: stopped at $seconds s)"
    }
    gemm 220 cpu_gemm --no-large | tee "$OUT/cpu_gemm.txt" | tail -25
    gemm 120 cpu_gemm_mlp_bf16 --no-f32 --shape 4096x11008x4096 |
      tee "$OUT/cpu_gemm_mlp_bf16.txt" | tail -6
    gemm 200 cpu_gemm_mlp_f32 --no-bf16 --shape 4096x11008x4096 |
      tee "$OUT/cpu_gemm_mlp_f32.txt" | tail -6
    ;;
  isa)
    # The development CPUs lately have no AVX-512; a GPU host often has. The
    # variants' bit-for-bit test and the 16-lane attention harness, which
    # adds the real AVX-512 variant to its comparison there.
    grep -o -w -E 'avx2|avx512f|avx512_bf16' /proc/cpuinfo | sort -u |
      tr '\n' ' ' | tee "$OUT/isa_flags.txt"
    echo
    (cd /tmp && python3 -c 'import polyops; print(polyops._C._cpu_isa())') |
      tee -a "$OUT/isa_flags.txt"
    python3 -m pytest -q -rs -p no:cacheprovider tests/cpu/test_cpu_isa.py \
      tests/cpu/test_cpu_wide_vectors.py --junitxml "$OUT/isa_junit.xml" \
      >"$OUT/isa_tests.log" 2>&1
    tail -3 "$OUT/isa_tests.log"
    ;;
  *)
    echo "usage: $0 build|test|bench|cpu|isa" >&2
    exit 2
    ;;
esac
