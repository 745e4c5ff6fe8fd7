// The unit of replication: a batch of operations decided together at one
// replicated time, and its wire encoding in the Raft log.
//
// Every replica decodes the same bytes and applies them with the same
// `now_ms`, so decisions (and so the stored bytes) are identical everywhere.
// The encoding is private to dedup but versioned: a replica refuses an entry
// of a version it does not know instead of guessing (DataLossError).
#ifndef DEDUP_STORAGE_LOG_ENTRY_H_
#define DEDUP_STORAGE_LOG_ENTRY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/authority.h"

namespace dedup {

enum class OpType : uint8_t {
  kBegin = 1,
  kComplete = 2,
  kRelease = 3,
  kRenew = 4,
  kGet = 5,
  kForget = 6,
  // Records a member's client address in the replicated state, so every
  // node can name a leader it was not started with (membership changes).
  kSetMember = 7,
  // Records an owner's progress (entry version 2).
  kCheckpoint = 8,
  // Replaces the shard map held in the replicated state (the meta group's),
  // if its epoch is still the one the proposer read (entry version 2).
  kSetShardMap = 9,
};

// The operations of an entry, one struct per OpType. `skey` is the storage
// key (storage_key.h) of the record an operation acts on.
struct LogBegin {
  std::string skey;
  BeginParams params;
};
struct LogComplete {
  std::string skey;
  CompleteParams params;
};
struct LogRelease {
  std::string skey;
  uint64_t fence = 0;
};
struct LogRenew {
  std::string skey;
  uint64_t fence = 0;
  int64_t lease_ms = 0;
};
struct LogGet {
  std::string skey;
};
struct LogForget {
  std::string skey;
};
// Acts on no record: the member's client address is stored where the
// other operations' key is (the encoding is shared).
struct LogSetMember {
  uint64_t member_id = 0;
  std::string client_address;
};
struct LogCheckpoint {
  std::string skey;
  CheckpointParams params;
};
// Acts on no record: a compare-and-set of the shard map. `map` is opaque
// here (replication/shard_layout.h encodes it); it is stored where the
// other operations' key is.
struct LogSetShardMap {
  uint64_t expected_epoch = 0;  // the stored map's epoch (0: none stored)
  uint64_t epoch = 0;           // the new map's; must be above expected
  std::string map;
};

// In OpType order: the alternative at index i is OpType i + 1.
using LogOp =
    std::variant<LogBegin, LogComplete, LogRelease, LogRenew, LogGet, LogForget,
                 LogSetMember, LogCheckpoint, LogSetShardMap>;

[[nodiscard]] inline OpType TypeOf(const LogOp& op) {
  return static_cast<OpType>(op.index() + 1);
}

// The storage key of the record `op` acts on; null for kSetMember and
// kSetShardMap.
[[nodiscard]] const std::string* KeyOf(const LogOp& op);

// An estimate of what `op` adds to an encoded entry: its variable-length
// fields plus a constant for the rest.
[[nodiscard]] size_t EstimatedBytes(const LogOp& op);

struct LogEntry {
  // Who proposed it: the leader's node id and a random id of its process,
  // plus a sequence number of that process. Only the proposer uses them (to
  // find the callers waiting for this entry's answers); a restarted node has
  // a new incarnation, so an old entry is never taken for a new one.
  uint64_t proposer = 0;
  uint64_t incarnation = 0;
  uint64_t sequence = 0;
  // The proposing leader's clock reading, Unix ms. Replicas decide with
  // max(this, the replicated time so far), so time never goes backwards.
  int64_t now_ms = 0;
  std::vector<LogOp> ops;
};

[[nodiscard]] std::string EncodeLogEntry(const LogEntry& entry);

// Fails with DataLossError on a checksum mismatch, truncated or trailing
// bytes, an unknown version or an unknown operation type.
[[nodiscard]] absl::StatusOr<LogEntry> DecodeLogEntry(absl::string_view bytes);

}  // namespace dedup

#endif  // DEDUP_STORAGE_LOG_ENTRY_H_
