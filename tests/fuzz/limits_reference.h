// The request limits as dedup.proto's file comment documents them, written
// independently of server/limits.cc, for fuzz_request_validation: each
// function names the first field that breaks a rule, in the order the API
// checks them, or nullopt when the request is valid.
#ifndef DEDUP_TESTS_FUZZ_LIMITS_REFERENCE_H_
#define DEDUP_TESTS_FUZZ_LIMITS_REFERENCE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "dedup/v1/dedup.pb.h"
#include "server/limits.h"

namespace dedup::fuzz {

inline bool NamespaceChar(unsigned char c) {
  return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == ':' ||
         c == '/' || c == '-';
}

inline bool AllPrintable(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

inline bool InRangeOrZero(uint32_t v, uint32_t lo, uint32_t hi) {
  return v == 0 || (lo <= v && v <= hi);
}

inline std::optional<std::string> BadTarget(const std::string& ns,
                                            const std::string& key,
                                            const Limits& l) {
  bool ns_ok = !ns.empty() && ns.size() <= l.max_namespace_bytes;
  for (unsigned char c : ns) ns_ok = ns_ok && NamespaceChar(c);
  if (!ns_ok) return "namespace";
  if (key.empty() || key.size() > l.max_key_bytes || !AllPrintable(key)) {
    return "key";
  }
  return std::nullopt;
}

inline std::optional<std::string> BadBegin(const v1::BeginRequest& r,
                                           const Limits& l) {
  if (auto bad = BadTarget(r.namespace_(), r.key(), l)) return bad;
  if (r.args_hash().size() > l.max_args_hash_bytes) return "args_hash";
  if (r.owner().size() > l.max_owner_bytes || !AllPrintable(r.owner())) {
    return "owner";
  }
  if (!InRangeOrZero(r.lease_ms(), l.min_lease_ms, l.max_lease_ms)) {
    return "lease_ms";
  }
  if (!InRangeOrZero(r.ttl_s(), l.min_ttl_s, l.max_ttl_s)) return "ttl_s";
  if (r.wait_ms() > l.max_wait_ms) return "wait_ms";
  return std::nullopt;
}

inline std::optional<std::string> BadComplete(const v1::CompleteRequest& r,
                                              const Limits& l) {
  if (auto bad = BadTarget(r.namespace_(), r.key(), l)) return bad;
  if (r.fence() == 0) return "fence";
  if (r.outcome() != v1::SUCCESS && r.outcome() != v1::ERROR) {
    return "outcome";
  }
  if (r.result().size() > l.max_result_bytes) return "result";
  if (!InRangeOrZero(r.ttl_s(), l.min_ttl_s, l.max_ttl_s)) return "ttl_s";
  return std::nullopt;
}

inline std::optional<std::string> BadRelease(const v1::ReleaseRequest& r,
                                             const Limits& l) {
  if (auto bad = BadTarget(r.namespace_(), r.key(), l)) return bad;
  if (r.fence() == 0) return "fence";
  return std::nullopt;
}

inline std::optional<std::string> BadRenew(const v1::RenewRequest& r,
                                           const Limits& l) {
  if (auto bad = BadTarget(r.namespace_(), r.key(), l)) return bad;
  if (r.fence() == 0) return "fence";
  if (!InRangeOrZero(r.lease_ms(), l.min_lease_ms, l.max_lease_ms)) {
    return "lease_ms";
  }
  return std::nullopt;
}

inline std::optional<std::string> BadCheckpoint(const v1::CheckpointRequest& r,
                                                const Limits& l) {
  if (auto bad = BadTarget(r.namespace_(), r.key(), l)) return bad;
  if (r.fence() == 0) return "fence";
  if (r.step().empty() || r.step().size() > l.max_checkpoint_step_bytes ||
      !AllPrintable(r.step())) {
    return "step";
  }
  if (r.data().size() > l.max_checkpoint_data_bytes) return "data";
  if (!InRangeOrZero(r.lease_ms(), l.min_lease_ms, l.max_lease_ms)) {
    return "lease_ms";
  }
  return std::nullopt;
}

}  // namespace dedup::fuzz

#endif  // DEDUP_TESTS_FUZZ_LIMITS_REFERENCE_H_
