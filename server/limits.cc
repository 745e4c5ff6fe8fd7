#include "server/limits.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dedup {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", rule));
}

// Names the offending byte so a user can find it in a long key.
std::string DescribeByte(const std::string& s, size_t i) {
  return absl::StrFormat("byte %d is 0x%02x", i,
                         static_cast<unsigned char>(s[i]));
}

bool IsNamespaceChar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' ||
         c == '/' || c == '-';
}

bool IsPrintableAscii(unsigned char c) { return c >= 0x20 && c <= 0x7e; }

absl::Status CheckNamespace(const std::string& ns, const Limits& limits) {
  if (ns.empty() || ns.size() > limits.max_namespace_bytes) {
    return Invalid("namespace",
                   absl::StrCat("must be 1..", limits.max_namespace_bytes,
                                " bytes, got ", ns.size()));
  }
  for (size_t i = 0; i < ns.size(); ++i) {
    if (!IsNamespaceChar(static_cast<unsigned char>(ns[i]))) {
      return Invalid("namespace", absl::StrCat(DescribeByte(ns, i),
                                               "; allowed: [A-Za-z0-9._:/-]"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPrintable(absl::string_view field, const std::string& s,
                            size_t min, size_t max) {
  if (s.size() < min || s.size() > max) {
    return Invalid(field, absl::StrCat("must be ", min, "..", max,
                                       " bytes, got ", s.size()));
  }
  for (size_t i = 0; i < s.size(); ++i) {
    if (!IsPrintableAscii(static_cast<unsigned char>(s[i]))) {
      return Invalid(field,
                     absl::StrCat(DescribeByte(s, i),
                                  "; must be printable ASCII (0x20..0x7e)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTarget(const std::string& ns, const std::string& key,
                         const Limits& limits) {
  if (absl::Status s = CheckNamespace(ns, limits); !s.ok()) return s;
  return CheckPrintable("key", key, 1, limits.max_key_bytes);
}

// `value` 0 selects the default and is always allowed.
absl::Status CheckRange(absl::string_view field, uint32_t value, uint32_t min,
                        uint32_t max, uint32_t default_value) {
  if (value != 0 && (value < min || value > max)) {
    return Invalid(field,
                   absl::StrCat("must be ", min, "..", max, " (or 0 for ",
                                default_value, "), got ", value));
  }
  return absl::OkStatus();
}

absl::Status CheckFence(uint64_t fence) {
  if (fence == 0)
    return Invalid("fence", "required (the fence Begin returned)");
  return absl::OkStatus();
}

}  // namespace

const std::vector<absl::string_view>& ValidatedFieldsOf(int method_index) {
  static const auto* const kFields =
      new std::vector<std::vector<absl::string_view>>{
          {"namespace", "key", "args_hash", "owner", "lease_ms", "ttl_s",
           "wait_ms"},
          {"namespace", "key", "fence", "outcome", "result", "ttl_s"},
          {"namespace", "key", "fence"},
          {"namespace", "key", "fence", "lease_ms"},
          {"namespace", "key"},
          {"namespace", "key"},
          {"items", "namespace", "key", "args_hash", "owner", "lease_ms",
           "ttl_s", "wait_ms"},
          {"items", "namespace", "key", "fence", "outcome", "result", "ttl_s"},
          {"namespace", "key", "fence", "step", "data", "lease_ms"},
          {"items", "namespace", "key", "fence", "step", "data", "lease_ms"},
          // Admin: Stats, Compact, ReloadPolicy, GetPolicy.
          {},
          {},
          {},
          {},
          // Cluster: Status, Digest, AddNode, RemoveNode, TransferLeadership,
          // FetchCheckpoint.
          {},
          {},
          {"node_id", "raft_address"},
          {"node_id"},
          {},
          {},
          // Admin: Backup.
          {},
          // Cluster: ShardMap; HostGroup, DropGroup, MoveReplica;
          // SetGroupReplicas.
          {},
          {},
          {},
          {},
          {}};
  return kFields->at(method_index);
}

absl::Status Limits::Check() const {
  if (max_namespace_bytes < 1 || max_namespace_bytes > 255) {
    return Invalid("max_namespace_bytes", "must be 1..255");
  }
  if (max_key_bytes < 1 || max_key_bytes > 4096) {
    return Invalid("max_key_bytes", "must be 1..4096");
  }
  if (max_owner_bytes > 4096)
    return Invalid("max_owner_bytes", "must be <= 4096");
  if (max_args_hash_bytes > 4096) {
    return Invalid("max_args_hash_bytes", "must be <= 4096");
  }
  if (max_batch_items < 1 || max_batch_items > 100'000) {
    return Invalid("max_batch_items", "must be 1..100000");
  }
  if (max_result_bytes > (64u << 20)) {
    return Invalid("max_result_bytes", "must be <= 64 MiB");
  }
  // Any one item must fit an answer alone, or asking again would never end.
  if (max_batch_response_bytes < max_result_bytes) {
    return Invalid(
        "max_batch_response_bytes",
        absl::StrCat("must be >= max_result_bytes (", max_result_bytes, ")"));
  }
  if (tombstone_retention_s > kMaxTombstoneRetentionS) {
    return Invalid("tombstone_retention_s",
                   absl::StrCat("must be <= ", kMaxTombstoneRetentionS,
                                " (365 days), got ", tombstone_retention_s));
  }
  if (max_checkpoint_step_bytes < 1 || max_checkpoint_step_bytes > 4096) {
    return Invalid("max_checkpoint_step_bytes", "must be 1..4096");
  }
  if (max_checkpoint_data_bytes > (16u << 20)) {
    return Invalid("max_checkpoint_data_bytes", "must be <= 16 MiB");
  }
  if (min_ttl_s < 1 || min_ttl_s > max_ttl_s || default_ttl_s < min_ttl_s ||
      default_ttl_s > max_ttl_s) {
    return Invalid("ttl limits",
                   "need 1 <= min_ttl_s <= default_ttl_s <= max_ttl_s");
  }
  if (min_lease_ms < 1 || min_lease_ms > max_lease_ms ||
      default_lease_ms < min_lease_ms || default_lease_ms > max_lease_ms) {
    return Invalid(
        "lease limits",
        "need 1 <= min_lease_ms <= default_lease_ms <= max_lease_ms");
  }
  return absl::OkStatus();
}

absl::Status ValidateBegin(const v1::BeginRequest& r, const Limits& limits) {
  if (absl::Status s = CheckTarget(r.namespace_(), r.key(), limits); !s.ok()) {
    return s;
  }
  if (r.args_hash().size() > limits.max_args_hash_bytes) {
    return Invalid("args_hash",
                   absl::StrCat("at most ", limits.max_args_hash_bytes,
                                " bytes, got ", r.args_hash().size()));
  }
  if (absl::Status s =
          CheckPrintable("owner", r.owner(), 0, limits.max_owner_bytes);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange("lease_ms", r.lease_ms(), limits.min_lease_ms,
                                  limits.max_lease_ms, limits.default_lease_ms);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange("ttl_s", r.ttl_s(), limits.min_ttl_s,
                                  limits.max_ttl_s, limits.default_ttl_s);
      !s.ok()) {
    return s;
  }
  if (r.wait_ms() > limits.max_wait_ms) {
    return Invalid("wait_ms", absl::StrCat("at most ", limits.max_wait_ms,
                                           ", got ", r.wait_ms()));
  }
  return absl::OkStatus();
}

absl::Status ValidateBatchSize(int items, const Limits& limits) {
  if (items < 1 || static_cast<uint32_t>(items) > limits.max_batch_items) {
    return Invalid("items", absl::StrCat("must be 1..", limits.max_batch_items,
                                         " items, got ", items));
  }
  return absl::OkStatus();
}

absl::Status ValidateBatchBegin(const v1::BeginRequest& r,
                                const Limits& limits) {
  if (absl::Status s = ValidateBegin(r, limits); !s.ok()) return s;
  if (r.wait_ms() != 0) {
    return Invalid("wait_ms",
                   absl::StrCat("must be 0 in a batch, got ", r.wait_ms()));
  }
  return absl::OkStatus();
}

absl::Status ValidateComplete(const v1::CompleteRequest& r,
                              const Limits& limits) {
  if (absl::Status s = CheckTarget(r.namespace_(), r.key(), limits); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckFence(r.fence()); !s.ok()) return s;
  if (r.outcome() != v1::SUCCESS && r.outcome() != v1::ERROR) {
    return Invalid("outcome",
                   absl::StrCat("must be SUCCESS or ERROR, got ",
                                v1::Outcome_Name(r.outcome()).empty()
                                    ? absl::StrCat(r.outcome())
                                    : v1::Outcome_Name(r.outcome())));
  }
  if (r.result().size() > limits.max_result_bytes) {
    return Invalid("result", absl::StrCat("at most ", limits.max_result_bytes,
                                          " bytes, got ", r.result().size()));
  }
  return CheckRange("ttl_s", r.ttl_s(), limits.min_ttl_s, limits.max_ttl_s,
                    limits.default_ttl_s);
}

absl::Status ValidateRelease(const v1::ReleaseRequest& r,
                             const Limits& limits) {
  if (absl::Status s = CheckTarget(r.namespace_(), r.key(), limits); !s.ok()) {
    return s;
  }
  return CheckFence(r.fence());
}

absl::Status ValidateRenew(const v1::RenewRequest& r, const Limits& limits) {
  if (absl::Status s = CheckTarget(r.namespace_(), r.key(), limits); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckFence(r.fence()); !s.ok()) return s;
  return CheckRange("lease_ms", r.lease_ms(), limits.min_lease_ms,
                    limits.max_lease_ms, limits.default_lease_ms);
}

absl::Status ValidateCheckpoint(const v1::CheckpointRequest& r,
                                const Limits& limits) {
  if (absl::Status s = CheckTarget(r.namespace_(), r.key(), limits); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckFence(r.fence()); !s.ok()) return s;
  if (absl::Status s =
          CheckPrintable("step", r.step(), 1, limits.max_checkpoint_step_bytes);
      !s.ok()) {
    return s;
  }
  if (r.data().size() > limits.max_checkpoint_data_bytes) {
    return Invalid("data",
                   absl::StrCat("at most ", limits.max_checkpoint_data_bytes,
                                " bytes, got ", r.data().size()));
  }
  if (r.lease_ms() != 0 && (r.lease_ms() < limits.min_lease_ms ||
                            r.lease_ms() > limits.max_lease_ms)) {
    return Invalid(
        "lease_ms",
        absl::StrCat("must be ", limits.min_lease_ms, "..", limits.max_lease_ms,
                     " (or 0 to leave the lease as it is), got ",
                     r.lease_ms()));
  }
  return absl::OkStatus();
}

absl::Status ValidateGet(const v1::GetRequest& r, const Limits& limits) {
  return CheckTarget(r.namespace_(), r.key(), limits);
}

absl::Status ValidateForget(const v1::ForgetRequest& r, const Limits& limits) {
  return CheckTarget(r.namespace_(), r.key(), limits);
}

}  // namespace dedup
