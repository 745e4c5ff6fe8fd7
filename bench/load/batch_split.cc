#include "bench/load/batch_split.h"

#include "absl/container/flat_hash_map.h"

namespace dedup::bench {

std::vector<BatchSlice> SplitByGroup(
    size_t n, const std::function<uint32_t(size_t)>& group_of) {
  std::vector<BatchSlice> slices;
  absl::flat_hash_map<uint32_t, size_t> index_of;  // group -> slices index
  for (size_t i = 0; i < n; ++i) {
    const uint32_t group = group_of(i);
    auto [it, fresh] = index_of.try_emplace(group, slices.size());
    if (fresh) slices.push_back(BatchSlice{group, {}});
    slices[it->second].items.push_back(i);
  }
  return slices;
}

}  // namespace dedup::bench
