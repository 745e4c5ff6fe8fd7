// How one operation of a replicated log entry is applied: decided on its
// stored record (storage/authority.h), staged in the entry's batch, answered.
// Used by RocksReplicatedState::Apply only.
//
// Thread safety: none of its own; the caller applies one entry at a time.
#ifndef DEDUP_STORAGE_REPLICATED_OPS_H_
#define DEDUP_STORAGE_REPLICATED_OPS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "storage/entry_batch.h"
#include "storage/log_entry.h"
#include "storage/replicated_state.h"

namespace dedup::replicated_internal {

// What applying one operation needs besides the operation: the entry's
// replicated time, its fence counter, its batch, the gate of whoever is
// answered (null: nobody) and the outputs.
struct OpContext {
  int64_t now = 0;
  uint64_t& fence;
  EntryBatch& batch;
  ResultGate* gate;
  AppliedEntry& out;
  uint64_t& result_bytes;  // stored results copied into answers
  uint64_t& map_epoch;     // the stored shard map's epoch (0: none)
};

// Applies `op`, the entry's operation `i`: decides it on its stored record,
// stages its write in the batch and, when someone is answered, appends its
// answer; records the key it settled, if any. An error fails the whole
// entry (a storage failure); a record that does not decode fails this
// operation alone, in its answer.
absl::Status ApplyOp(const LogOp& op, size_t i, OpContext& c);

}  // namespace dedup::replicated_internal

#endif  // DEDUP_STORAGE_REPLICATED_OPS_H_
