// Tenants: who may call dedupd, on which namespaces, in which roles.
//
// The tenants file (--tenants_file) is JSON:
//
//   {"tenants": [
//     {"name": "billing",
//      "token_sha256": ["<64 hex digits: SHA-256 of the bearer token>"],
//      "cert_sans": ["billing-tools.example.com"],
//      "namespace_prefixes": ["billing:"],
//      "roles": ["client"],
//      "limits": {"rps": 1000, "inflight": 256, "stored_bytes": 1073741824}}]}
//
// A credential is a bearer token (only its SHA-256 is stored, so the file
// holds no secret) or a Subject Alternative Name of a verified mTLS client
// certificate. Each credential names exactly one tenant: the same token
// digest or SAN in two tenants is an error. A tenant may use the namespaces
// that start with one of its prefixes ("" allows every namespace). Roles:
// "client" (Begin, Complete, Release, Renew, Get and the batches) and
// "operator" (also Forget, the Admin and Cluster services). Limits are
// optional; 0 or absent means unlimited.
//
// Unknown keys are errors (a misspelt "namespace_prefix" would otherwise
// grant nothing, silently). Every error names the line and the field:
//   "line 7: tenants[1].roles[0]: unknown role \"admin\" (client, operator)"
#ifndef DEDUP_SERVER_TENANTS_H_
#define DEDUP_SERVER_TENANTS_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dedup {

enum class TenantRole : uint8_t { kClient = 1, kOperator = 2 };

struct TenantLimits {
  uint64_t rps = 0;           // requests per second (batch items count one)
  uint64_t inflight = 0;      // calls in flight at once
  uint64_t stored_bytes = 0;  // key + value bytes stored (auth.h)
};

using TokenDigest = std::array<unsigned char, 32>;

struct Tenant {
  std::string name;
  std::vector<TokenDigest> token_digests;
  std::vector<std::string> cert_sans;
  std::vector<std::string> namespace_prefixes;
  bool client = false;
  bool operator_role = false;
  TenantLimits limits;

  bool HasRole(TenantRole role) const {
    return role == TenantRole::kClient ? (client || operator_role)
                                       : operator_role;
  }
  bool AllowsNamespace(absl::string_view ns) const;
};

// An immutable set of tenants. Thread-safe (const after Parse).
class TenantTable {
 public:
  // INVALID_ARGUMENT naming the line and field of the first error.
  [[nodiscard]] static absl::StatusOr<TenantTable> Parse(
      absl::string_view json_text);

  // The tenant whose token digest equals SHA-256(token), or null. Compares
  // against every digest in constant time per digest, whichever matches.
  const Tenant* FindByToken(absl::string_view token) const;
  // The tenant listing one of `sans`, or null.
  const Tenant* FindBySan(const std::vector<std::string>& sans) const;

  const std::vector<Tenant>& tenants() const { return tenants_; }

 private:
  std::vector<Tenant> tenants_;
};

// SHA-256 of `token`, as stored in token_sha256 (for tests and tooling).
[[nodiscard]] TokenDigest DigestOfToken(absl::string_view token);

}  // namespace dedup

#endif  // DEDUP_SERVER_TENANTS_H_
