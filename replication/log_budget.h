// How many entries libraft may keep between snapshots and behind one, so that
// the entries it holds fit a byte budget whatever their size.
//
// libraft 0.15 keeps every entry since (last snapshot - trailing) in memory as
// well as on disk, and counts its snapshot threshold and trailing in entries.
// Our entries are batches of up to 4096 operations, so fixed counts let the
// log grow to gigabytes (docs/decisions.md). This scales both counts down, to
// no fewer than 16 entries, as the average entry grows: threshold and trailing
// each get half the budget.
//
// Thread safety: none (the consensus thread owns it).
#ifndef DEDUP_REPLICATION_LOG_BUDGET_H_
#define DEDUP_REPLICATION_LOG_BUDGET_H_

#include <cstddef>
#include <cstdint>

namespace dedup {

class LogBudget {
 public:
  // The counts never exceed `max_threshold` and `max_trailing` (the
  // configured ones).
  LogBudget(uint64_t budget_bytes, unsigned max_threshold,
            unsigned max_trailing);

  // Called with the size of each applied entry, in bytes.
  void Observe(size_t entry_bytes);

  // Entries between snapshots, and kept behind one.
  unsigned threshold() const { return threshold_; }
  unsigned trailing() const { return trailing_; }

  // Fewest entries either count goes down to (unless configured lower).
  static constexpr unsigned kMinEntries = 16;

 private:
  void Refit();

  const uint64_t budget_bytes_;
  const unsigned max_threshold_;
  const unsigned max_trailing_;
  double average_entry_bytes_ = 0;  // moving average over ~32 entries
  unsigned threshold_;
  unsigned trailing_;
};

}  // namespace dedup

#endif  // DEDUP_REPLICATION_LOG_BUDGET_H_
