// Splitting a batch by Raft group, and joining the answers of its slices:
// with slot routing, dedup-bench sends each group's share of a BeginBatch or
// CompleteBatch straight to that group's leader, as a sharded client does,
// instead of letting the receiving node split and forward it.
#ifndef DEDUP_BENCH_LOAD_BATCH_SPLIT_H_
#define DEDUP_BENCH_LOAD_BATCH_SPLIT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/load/backend.h"

namespace dedup::bench {

// One group's share of a batch: the indexes of its items, in batch order.
struct BatchSlice {
  uint32_t group = 0;
  std::vector<size_t> items;
};

// The items 0..n-1 grouped by `group_of(i)`; slices in the order of each
// group's first item. Pure.
[[nodiscard]] std::vector<BatchSlice> SplitByGroup(
    size_t n, const std::function<uint32_t(size_t)>& group_of);

// `all` restricted to `slice`'s items, in order.
template <typename T>
std::vector<T> Pick(const std::vector<T>& all, const BatchSlice& slice) {
  std::vector<T> out;
  out.reserve(slice.items.size());
  for (size_t i : slice.items) out.push_back(all[i]);
  return out;
}

// Gathers the answers of a batch's slices into one answer per item, in
// batch order, and calls `done` once, when the last slice answered (on that
// slice's thread). A slice whose call failed as a whole (its answer is not
// one per item) gives each of its items that error. Thread-safe: slices may
// answer concurrently, each once.
template <typename A>
class SliceJoin {
 public:
  SliceJoin(size_t n, size_t slices, Done<std::vector<A>> done)
      : answers_(n), pending_(slices), done_(std::move(done)) {}

  void Answer(const BatchSlice& slice, std::vector<A> answers) {
    const bool whole = answers.size() == slice.items.size();
    for (size_t k = 0; k < slice.items.size(); ++k) {
      A& to = answers_[slice.items[k]];
      if (whole) {
        to = std::move(answers[k]);
      } else {
        to = A{};
        to.error = answers.empty() || answers[0].error.empty()
                       ? absl::StrCat("group ", slice.group, " answered ",
                                      answers.size(), " items for ",
                                      slice.items.size())
                       : answers[0].error;
      }
    }
    // acq_rel: the last slice sees every other slice's writes.
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      done_(std::move(answers_));
    }
  }

 private:
  std::vector<A> answers_;  // each slice writes only its own items
  std::atomic<size_t> pending_;
  const Done<std::vector<A>> done_;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LOAD_BATCH_SPLIT_H_
