// Opt-in measured choice of the CPU matrix-product path (oneDNN, the own
// kernels, OpenBLAS; cpu/kernels/gemm/blas_gemm.cc). Off by default, so that a
// product's path, and with it its bits, follow fixed rules. On
// (POLYOPS_AUTOTUNE=1 or polyops.autotune(True)), the first product of a new
// geometry times every path that accepts it on scratch output and keeps the
// fastest for that geometry: CPU kinds nobody here has measured (AMX,
// AVX512-FP16) then run whatever is fastest on them, without a routing rule
// written for them. docs/backends/cpu_gemm.md, "Autotune".
#ifndef POLYOPS_CPU_KERNELS_GEMM_GEMM_AUTOTUNE_H_
#define POLYOPS_CPU_KERNELS_GEMM_GEMM_AUTOTUNE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/data_type.h"
#include "core/gemm_layout.h"

namespace polyops::cpu::autotune {

// The paths a product can take, in the order they are timed.
enum class Path { kOneDnn, kOwn, kOpenBlas };

const char* PathName(Path path);

// Whether products pick their path by measurement. The first call reads
// POLYOPS_AUTOTUNE ("1" on, "0" or unset off; anything else is a
// ValueError naming the variable, raised by that call); Enable overrides it.
bool Enabled();
void Enable(bool on);

// A product's geometry: dtype, sizes, every operand's strides and BLAS
// view, whether c is summed and alpha is 1 (they change oneDNN's
// post-ops). No data pointers and no values.
using Key = std::vector<int64_t>;
// dtype, batch, m, n, k; 3 strides x 4 operands; 2 x 3 BLAS views; 3 flags.
inline constexpr size_t kKeySize = 5 + 12 + 6 + 3;
// The same geometry gets the same key in matmul, gemm and linear.
Key MakeKey(const GemmLayout& layout, DataType dtype, bool use_sum,
            bool alpha_is_one);

// One measured geometry: the pick and each path's best time in
// microseconds (paths that refused the geometry are absent).
struct Entry {
  std::string op;  // the op whose call measured it
  Key key;
  Path pick = Path::kOpenBlas;
  std::vector<std::pair<Path, double>> timings_us;
};

// The pick recorded for `key`, if any.
std::optional<Path> Find(const Key& key);
// Records a measurement (or a pick loaded from a file, without timings).
// At most kCapacity geometries are kept; past that the oldest goes.
void Record(Entry entry);
inline constexpr size_t kCapacity = 1024;

// Every recorded geometry, oldest first.
std::vector<Entry> Entries();
void Clear();

}  // namespace polyops::cpu::autotune

#endif  // POLYOPS_CPU_KERNELS_GEMM_GEMM_AUTOTUNE_H_
