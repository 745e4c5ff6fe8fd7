#include "server/namespace_policy.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/lined_json.h"

namespace dedup {
namespace {

using Type = LinedJson::Type;

// Bounds of the values a policy may set, beyond which the server's own
// arithmetic or clients' expectations break.
constexpr uint32_t kMaxTtlS = 365 * 24 * 3600;
constexpr uint32_t kMaxLeaseMs = 24 * 3600 * 1000;
constexpr uint32_t kMaxRetentionS = Limits::kMaxTombstoneRetentionS;

absl::Status ReadUint(const LinedJson& value, const std::string& path,
                      uint32_t min, uint32_t max,
                      std::optional<uint32_t>* out) {
  if (value.type != Type::kNumber || !value.is_integer || value.is_negative ||
      value.integer < min || value.integer > max) {
    return JsonErrorAt(
        value, path,
        absl::StrCat("must be a whole number ", min, "..", max,
                     value.type == Type::kNumber && value.is_integer
                         ? absl::StrCat(", got ", value.is_negative ? "-" : "",
                                        value.integer)
                         : ""));
  }
  *out = static_cast<uint32_t>(value.integer);
  return absl::OkStatus();
}

absl::StatusOr<NamespacePolicy> ParsePolicy(const LinedJson& value,
                                            const std::string& path,
                                            const Limits& server) {
  if (absl::Status s = ExpectJsonType(value, path, Type::kObject); !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckJsonKeys(value, path,
                        {"prefix", "name", "default_ttl_s", "max_ttl_s",
                         "default_lease_ms", "max_lease_ms", "max_result_bytes",
                         "tombstone_retention_s", "on_error"});
      !s.ok()) {
    return s;
  }
  NamespacePolicy policy;
  const LinedJson* prefix = value.Find("prefix");
  if (prefix == nullptr) return JsonErrorAt(value, path, "has no \"prefix\"");
  if (absl::Status s = ExpectJsonType(*prefix, path + ".prefix", Type::kString);
      !s.ok()) {
    return s;
  }
  policy.prefix = prefix->string;
  policy.name = policy.prefix;
  for (const auto& [key, field] : value.members) {
    const std::string at = absl::StrCat(path, ".", key);
    absl::Status s;
    if (key == "name") {
      s = ExpectJsonType(field, at, Type::kString);
      if (s.ok() && field.string.empty())
        s = JsonErrorAt(field, at, "is empty");
      if (s.ok()) policy.name = field.string;
    } else if (key == "default_ttl_s") {
      s = ReadUint(field, at, 1, kMaxTtlS, &policy.default_ttl_s);
    } else if (key == "max_ttl_s") {
      s = ReadUint(field, at, 1, kMaxTtlS, &policy.max_ttl_s);
    } else if (key == "default_lease_ms") {
      s = ReadUint(field, at, server.min_lease_ms, kMaxLeaseMs,
                   &policy.default_lease_ms);
    } else if (key == "max_lease_ms") {
      s = ReadUint(field, at, server.min_lease_ms, kMaxLeaseMs,
                   &policy.max_lease_ms);
    } else if (key == "max_result_bytes") {
      s = ReadUint(field, at, 0, server.max_result_bytes,
                   &policy.max_result_bytes);
    } else if (key == "tombstone_retention_s") {
      s = ReadUint(field, at, 0, kMaxRetentionS, &policy.tombstone_retention_s);
    } else if (key == "on_error") {
      s = ExpectJsonType(field, at, Type::kString);
      if (s.ok() && field.string != "replay" && field.string != "retry") {
        s = JsonErrorAt(field, at,
                        absl::StrCat("must be \"replay\" or \"retry\", got \"",
                                     field.string, "\""));
      }
      policy.retry_errors = field.string == "retry";
    }
    if (!s.ok()) return s;
  }
  return policy;
}

// The server's limits with `policy`'s values over them.
Limits Apply(const Limits& server, const NamespacePolicy& policy) {
  Limits l = server;
  if (policy.max_ttl_s) l.max_ttl_s = *policy.max_ttl_s;
  if (policy.default_ttl_s) l.default_ttl_s = *policy.default_ttl_s;
  if (policy.max_lease_ms) l.max_lease_ms = *policy.max_lease_ms;
  if (policy.default_lease_ms) l.default_lease_ms = *policy.default_lease_ms;
  if (policy.max_result_bytes) l.max_result_bytes = *policy.max_result_bytes;
  if (policy.tombstone_retention_s) {
    l.tombstone_retention_s = *policy.tombstone_retention_s;
  }
  // A max below the server's min (or a default outside) is caught by the
  // coherence check at parse time.
  return l;
}

}  // namespace

absl::StatusOr<PolicyTable> PolicyTable::Parse(absl::string_view json_text,
                                               const Limits& server) {
  absl::StatusOr<LinedJson> root = ParseLinedJson(json_text);
  if (!root.ok()) return root.status();
  if (absl::Status s = ExpectJsonType(*root, "(top level)", Type::kObject);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckJsonKeys(*root, "(top level)", {"policies"});
      !s.ok()) {
    return s;
  }
  PolicyTable table(server);
  const LinedJson* policies = root->Find("policies");
  if (policies == nullptr) return table;
  if (absl::Status s = ExpectJsonType(*policies, "policies", Type::kArray);
      !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < policies->items.size(); ++i) {
    const LinedJson& item = policies->items[i];
    const std::string path = absl::StrCat("policies[", i, "]");
    absl::StatusOr<NamespacePolicy> policy = ParsePolicy(item, path, server);
    if (!policy.ok()) return policy.status();
    const Limits effective = Apply(server, *policy);
    if (effective.default_ttl_s > effective.max_ttl_s ||
        effective.min_ttl_s > effective.max_ttl_s) {
      return JsonErrorAt(
          item, path,
          absl::StrCat("default_ttl_s (", effective.default_ttl_s,
                       ") must be between the min (", effective.min_ttl_s,
                       ") and max_ttl_s (", effective.max_ttl_s, ")"));
    }
    if (effective.default_lease_ms > effective.max_lease_ms) {
      return JsonErrorAt(
          item, path,
          absl::StrCat("default_lease_ms (", effective.default_lease_ms,
                       ") must be at most max_lease_ms (",
                       effective.max_lease_ms, ")"));
    }
    if (!table.by_prefix_.emplace(policy->prefix, *policy).second) {
      return JsonErrorAt(
          item, path + ".prefix",
          absl::StrCat("prefix \"", policy->prefix, "\" already has a policy"));
    }
  }
  return table;
}

EffectivePolicy PolicyTable::For(absl::string_view ns) const {
  EffectivePolicy out;
  const NamespacePolicy* best = nullptr;
  // Few policies: a scan beats cleverness, and the longest match wins.
  for (const auto& [prefix, policy] : by_prefix_) {
    if (absl::StartsWith(ns, prefix) &&
        (best == nullptr || prefix.size() > best->prefix.size())) {
      best = &policy;
    }
  }
  if (best == nullptr) {
    out.limits = server_;
    return out;
  }
  out.limits = Apply(server_, *best);
  out.retry_errors = best->retry_errors;
  out.name = best->name;
  out.prefix = best->prefix;
  return out;
}

PolicyFile::PolicyFile(std::string path, const Limits& server)
    : path_(std::move(path)),
      server_(server),
      table_(std::make_shared<const PolicyTable>(server)) {}

absl::Status PolicyFile::Reload() {
  if (path_.empty()) return absl::OkStatus();
  std::ifstream in(path_);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<PolicyTable> parsed =
      in ? PolicyTable::Parse(text.str(), server_)
         : absl::StatusOr<PolicyTable>(absl::NotFoundError("cannot read it"));
  if (!parsed.ok()) {
    reloads_failed_.fetch_add(1);
    return absl::Status(parsed.status().code(),
                        absl::StrCat(path_, ": ", parsed.status().message()));
  }
  auto table = std::make_shared<const PolicyTable>(*std::move(parsed));
  {
    absl::MutexLock lock(&mu_);
    table_ = std::move(table);
  }
  reloads_ok_.fetch_add(1);
  return absl::OkStatus();
}

std::shared_ptr<const PolicyTable> PolicyFile::Current() const {
  absl::MutexLock lock(&mu_);
  return table_;
}

absl::Status NamePolicy(absl::Status refusal, const EffectivePolicy& policy) {
  if (refusal.ok() || policy.name.empty()) return refusal;
  return absl::Status(
      refusal.code(),
      absl::StrCat(refusal.message(), " (policy \"", policy.name, "\")"));
}

}  // namespace dedup
