// Per-namespace policy: defaults and limits that differ by namespace prefix.
//
// The policy file (--policy_file) is JSON:
//
//   {"policies": [
//     {"prefix": "billing:", "name": "billing",
//      "default_ttl_s": 604800, "max_ttl_s": 2592000,
//      "default_lease_ms": 30000, "max_lease_ms": 600000,
//      "max_result_bytes": 65536,
//      "tombstone_retention_s": 2592000,
//      "on_error": "replay"}]}
//
// The longest matching prefix wins ("" matches every namespace); a namespace
// no policy matches, and every field a policy leaves out, keep the server's
// flags. `on_error` says what an ERROR outcome means for the next Begin:
// "replay" (the default: DUPLICATE with the stored error, never run again)
// or "retry" (a fresh attempt, STARTED with a higher fence). `name` (default:
// the prefix) is what refusals name:
//   "ttl_s: must be 1..3600 (or 0 for 600), got 7200 (policy \"billing\")"
//
// Every decision that depends on the policy (resolved TTL and lease,
// retention, the ERROR rule) is made when a request arrives and travels in
// the operation, so replicas of a group never decide differently because
// their policy files differ.
//
// Unknown keys, a value out of the server's bounds, a default above its max
// and a prefix given twice are errors naming the line and the field:
//   "line 4: policies[0].max_ttl_s: must be 1..31536000, got 0"
#ifndef DEDUP_SERVER_NAMESPACE_POLICY_H_
#define DEDUP_SERVER_NAMESPACE_POLICY_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/limits.h"

namespace dedup {

struct NamespacePolicy {
  std::string name;
  std::string prefix;
  std::optional<uint32_t> default_ttl_s;
  std::optional<uint32_t> max_ttl_s;
  std::optional<uint32_t> default_lease_ms;
  std::optional<uint32_t> max_lease_ms;
  std::optional<uint32_t> max_result_bytes;
  std::optional<uint32_t> tombstone_retention_s;
  bool retry_errors = false;  // on_error: "retry"
};

// What applies to one namespace.
struct EffectivePolicy {
  Limits limits;
  bool retry_errors = false;
  // The policy that matched; empty when the server's flags apply.
  std::string name;
  std::string prefix;
};

// Immutable once parsed; thread-safe to share.
class PolicyTable {
 public:
  // An empty table: every namespace gets `server` (the flags).
  explicit PolicyTable(Limits server) : server_(server) {}

  // Parses a policy file; `server` supplies every value a policy leaves out
  // and the bounds values are checked against (max_result_bytes at most the
  // server's, which sizes its gRPC messages).
  [[nodiscard]] static absl::StatusOr<PolicyTable> Parse(
      absl::string_view json_text, const Limits& server);

  [[nodiscard]] EffectivePolicy For(absl::string_view ns) const;
  [[nodiscard]] size_t size() const { return by_prefix_.size(); }

 private:
  Limits server_;
  std::map<std::string, NamespacePolicy, std::less<>> by_prefix_;
};

// The policy file as last loaded: Reload() replaces the table only when the
// new file parses, so a bad edit keeps the old policy. Thread-safe.
class PolicyFile {
 public:
  // `path` empty: no file, the flags apply everywhere.
  PolicyFile(std::string path, const Limits& server);
  // Reads and parses the file; on error the current table stays and the
  // error names the file, line and field.
  [[nodiscard]] absl::Status Reload();
  [[nodiscard]] std::shared_ptr<const PolicyTable> Current() const;
  const std::string& path() const { return path_; }
  // Times Reload succeeded / failed.
  [[nodiscard]] uint64_t reloads_ok() const { return reloads_ok_.load(); }
  [[nodiscard]] uint64_t reloads_failed() const {
    return reloads_failed_.load();
  }

 private:
  const std::string path_;
  const Limits server_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const PolicyTable> table_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> reloads_ok_{0};
  std::atomic<uint64_t> reloads_failed_{0};
};

// " (policy \"NAME\")" appended to a refusal's message when a policy
// applied; the refusal itself otherwise.
[[nodiscard]] absl::Status NamePolicy(absl::Status refusal,
                                      const EffectivePolicy& policy);

}  // namespace dedup

#endif  // DEDUP_SERVER_NAMESPACE_POLICY_H_
