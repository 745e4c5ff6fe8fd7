// Input limits and defaults of the API, and the validation of every request
// field against them. A rejected request gets INVALID_ARGUMENT whose message
// starts with the field name and states the rule, e.g.
//   "key: must be 1..255 bytes, got 256"
#ifndef DEDUP_SERVER_LIMITS_H_
#define DEDUP_SERVER_LIMITS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "dedup/v1/dedup.pb.h"

namespace dedup {

struct Limits {
  uint32_t max_key_bytes = 255;
  uint32_t max_namespace_bytes = 128;
  uint32_t max_owner_bytes = 128;
  uint32_t max_args_hash_bytes = 64;
  uint32_t max_result_bytes = 1 << 20;
  uint32_t min_ttl_s = 1;
  uint32_t max_ttl_s = 30 * 24 * 3600;
  uint32_t default_ttl_s = 24 * 3600;
  uint32_t min_lease_ms = 100;
  uint32_t max_lease_ms = 3600 * 1000;
  uint32_t default_lease_ms = 60 * 1000;
  uint32_t max_wait_ms = 60 * 1000;
  uint32_t max_batch_items = 1000;
  // Stored results one BeginBatch answer may carry; DUPLICATE items past it
  // are answered UNAVAILABLE (ask again). Bounds the memory of a response,
  // and keeps it under gRPC clients' default 4 MiB receive limit.
  uint32_t max_batch_response_bytes = 3 << 20;
  uint32_t max_checkpoint_step_bytes = 128;
  uint32_t max_checkpoint_data_bytes = 64 << 10;
  // How long a completed record's tombstone is kept after it expires (a
  // late Begin then answers EXPIRED instead of starting again); 0: none.
  uint32_t tombstone_retention_s = 7 * 24 * 3600;
  // Beyond a year a replicated Complete's retention would not fit its log
  // entry (at most 2^40 ms), and every follower would stop on it.
  static constexpr uint32_t kMaxTombstoneRetentionS = 365 * 24 * 3600;

  // Checks the limits are coherent with each other and with the storage
  // format (e.g. a namespace length must fit one byte).
  [[nodiscard]] absl::Status Check() const;
};

// Each returns OK or INVALID_ARGUMENT naming the first bad field. When the
// call is valid, the zero "use the default" values are left for the caller to
// resolve with ResolveTtl/ResolveLease.
[[nodiscard]] absl::Status ValidateBegin(const v1::BeginRequest& r,
                                         const Limits& limits);
[[nodiscard]] absl::Status ValidateComplete(const v1::CompleteRequest& r,
                                            const Limits& limits);
[[nodiscard]] absl::Status ValidateRelease(const v1::ReleaseRequest& r,
                                           const Limits& limits);
[[nodiscard]] absl::Status ValidateRenew(const v1::RenewRequest& r,
                                         const Limits& limits);
[[nodiscard]] absl::Status ValidateCheckpoint(const v1::CheckpointRequest& r,
                                              const Limits& limits);
[[nodiscard]] absl::Status ValidateGet(const v1::GetRequest& r,
                                       const Limits& limits);
[[nodiscard]] absl::Status ValidateForget(const v1::ForgetRequest& r,
                                          const Limits& limits);

// Batch size rule: INVALID_ARGUMENT "items: ..." unless 1..max_batch_items.
[[nodiscard]] absl::Status ValidateBatchSize(int items, const Limits& limits);

// A batch item's begin rules plus "wait_ms must be 0" (one parked key must
// not hold a whole batch).
[[nodiscard]] absl::Status ValidateBatchBegin(const v1::BeginRequest& r,
                                              const Limits& limits);

// Fields a method's validation may name, in check order (for metrics).
// `method_index` follows the Method enum of metrics.h: Begin, Complete,
// Release, Renew, Get, Forget, BeginBatch, CompleteBatch, Checkpoint,
// CheckpointBatch, then the Admin and Cluster methods. An index without an
// entry throws std::out_of_range: the metrics set every method's series up at
// start, so a Method added without one stops the server there rather than
// reading past the table.
[[nodiscard]] const std::vector<absl::string_view>& ValidatedFieldsOf(
    int method_index);

// 0 means the default.
[[nodiscard]] inline uint32_t ResolveTtl(uint32_t ttl_s, const Limits& l) {
  return ttl_s == 0 ? l.default_ttl_s : ttl_s;
}
[[nodiscard]] inline uint32_t ResolveLease(uint32_t lease_ms, const Limits& l) {
  return lease_ms == 0 ? l.default_lease_ms : lease_ms;
}

}  // namespace dedup

#endif  // DEDUP_SERVER_LIMITS_H_
