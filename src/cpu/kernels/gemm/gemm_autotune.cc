#include "cpu/kernels/gemm/gemm_autotune.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.h"

namespace polyops::cpu::autotune {
namespace {

// -1: not read yet; 0 off; 1 on.
std::atomic<int> g_enabled{-1};

struct Slot {
  uint64_t sequence;  // when recorded: the smallest goes first
  Entry entry;
};

struct Table {
  std::mutex mutex;
  std::map<Key, Slot> entries;
  uint64_t sequence = 0;
};

Table& GetTable() {
  static Table* table = new Table;  // used until exit
  return *table;
}

int FromEnvironment() {
  const char* value = std::getenv("POLYOPS_AUTOTUNE");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "0") == 0) {
    return 0;
  }
  if (std::strcmp(value, "1") == 0) return 1;
  throw InvalidArgument(detail::Concat(
      "polyops: environment variable POLYOPS_AUTOTUNE must be 0 or 1, got '",
      value, "'"));
}

void PushMatrix(Key& key, const GemmMatrix& matrix) {
  key.push_back(matrix.batch_stride);
  key.push_back(matrix.row_stride);
  key.push_back(matrix.col_stride);
}

void PushView(Key& key, const BlasView& view) {
  key.push_back(view.trans ? 1 : 0);
  key.push_back(view.ld);
}

}  // namespace

const char* PathName(Path path) {
  switch (path) {
    case Path::kOneDnn:
      return "onednn";
    case Path::kOwn:
      return "own";
    case Path::kOpenBlas:
      return "openblas";
  }
  return "openblas";
}

bool Enabled() {
  int enabled = g_enabled.load(std::memory_order_relaxed);
  if (enabled < 0) {
    // Not stored when the variable is invalid: every call raises until it
    // is fixed or Enable decides.
    enabled = FromEnvironment();
    int expected = -1;
    g_enabled.compare_exchange_strong(expected, enabled);
    enabled = g_enabled.load(std::memory_order_relaxed);
  }
  return enabled == 1;
}

void Enable(bool on) { g_enabled.store(on ? 1 : 0); }

Key MakeKey(const GemmLayout& l, DataType dtype, bool use_sum,
            bool alpha_is_one) {
  Key key{static_cast<int64_t>(dtype), l.batch, l.m, l.n, l.k};
  for (const GemmMatrix* matrix : {&l.a, &l.b, &l.c, &l.out}) {
    PushMatrix(key, *matrix);
  }
  for (const BlasView* view : {&l.a_blas, &l.b_blas, &l.out_blas}) {
    PushView(key, *view);
  }
  key.push_back(l.has_c ? 1 : 0);
  key.push_back(use_sum ? 1 : 0);
  key.push_back(alpha_is_one ? 1 : 0);
  return key;
}

std::optional<Path> Find(const Key& key) {
  Table& table = GetTable();
  std::lock_guard<std::mutex> lock(table.mutex);
  const auto found = table.entries.find(key);
  if (found == table.entries.end()) return std::nullopt;
  return found->second.entry.pick;
}

void Record(Entry entry) {
  Table& table = GetTable();
  std::lock_guard<std::mutex> lock(table.mutex);
  if (table.entries.size() >= kCapacity &&
      table.entries.find(entry.key) == table.entries.end()) {
    auto oldest = table.entries.begin();
    for (auto it = table.entries.begin(); it != table.entries.end(); ++it) {
      if (it->second.sequence < oldest->second.sequence) oldest = it;
    }
    table.entries.erase(oldest);
  }
  Key key = entry.key;
  table.entries[std::move(key)] = Slot{++table.sequence, std::move(entry)};
}

std::vector<Entry> Entries() {
  Table& table = GetTable();
  std::lock_guard<std::mutex> lock(table.mutex);
  std::vector<const Slot*> slots;
  for (const auto& item : table.entries) slots.push_back(&item.second);
  std::sort(slots.begin(), slots.end(), [](const Slot* a, const Slot* b) {
    return a->sequence < b->sequence;
  });
  std::vector<Entry> entries;
  for (const Slot* slot : slots) entries.push_back(slot->entry);
  return entries;
}

void Clear() {
  Table& table = GetTable();
  std::lock_guard<std::mutex> lock(table.mutex);
  table.entries.clear();
}

}  // namespace polyops::cpu::autotune
