// Authentication and authorization of each call: who is calling (a bearer
// token or a verified client certificate, looked up in the tenants file) and
// whether that tenant may use this method on this namespace.
//
// Order in every handler: authenticate, then authorize the role, then the
// namespace, then validate the request. A refusal never depends on stored
// data, so PERMISSION_DENIED says nothing about whether a key exists.
//
// Answers:
//   UNAUTHENTICATED    no credential, an unknown token, or a certificate
//                      whose names are in no tenant
//   RESOURCE_EXHAUSTED the caller's address made too many of those lately
//                      (auth_failure_limiter.h), checked before anything
//   PERMISSION_DENIED  the tenant lacks the role, or the namespace is outside
//                      its prefixes (batches: per item)
// Refusals are counted in dedup_auth_refusals_total{reason}; never by token.
#ifndef DEDUP_SERVER_AUTH_H_
#define DEDUP_SERVER_AUTH_H_

#include <array>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "server/auth_failure_limiter.h"
#include "server/tenant_limiter.h"
#include "server/tenants.h"
#include "storage/namespace_bytes.h"

namespace dedup {

// The authenticated caller of one call. Copyable; keeps the tenant table it
// was found in alive, so a reload during the call changes nothing for it.
class Caller {
 public:
  // Auth off: allowed everything.
  Caller() = default;
  Caller(std::shared_ptr<const TenantTable> table, const Tenant* tenant)
      : table_(std::move(table)), tenant_(tenant) {}

  // Null when auth is off.
  const Tenant* tenant() const { return tenant_; }

 private:
  std::shared_ptr<const TenantTable> table_;
  const Tenant* tenant_ = nullptr;
};

// Why a call was refused, for metrics.
enum class Refusal {
  kNoCredential,
  kUnknownToken,
  kUnknownCertificate,
  kRole,
  kNamespace,
  kTooManyFailures,  // the address's failed authentications
};
inline constexpr int kRefusalCount = 6;

// How long a tenant over its stored_bytes limit is told to wait: its usage
// falls only as records expire or are forgotten.
inline constexpr int64_t kStoredBytesRetryMs = 10'000;

// Thread-safe.
class Authorizer {
 public:
  // Auth off: every call is allowed (local development; dedupd allows it
  // only on a loopback address unless told --insecure).
  explicit Authorizer(prometheus::Registry* registry);
  // Auth on, from the tenants file at `path`; failed authentications are
  // limited per peer address by `failures`. The error names the file and,
  // for a bad file, the line.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Authorizer>> FromFile(
      const std::string& path, prometheus::Registry* registry,
      AuthFailureLimits failures = {});
  // Stops the file watcher, if any.
  ~Authorizer();

  bool enabled() const { return !path_.empty(); }

  // The caller of `context`, or UNAUTHENTICATED (RESOURCE_EXHAUSTED with a
  // retry delay while its address is over its failures).
  [[nodiscard]] absl::StatusOr<Caller> Authenticate(
      const grpc::ServerContextBase& context) const;
  // PERMISSION_DENIED unless `caller` has `role`; `what` names the method
  // for the message ("Forget").
  [[nodiscard]] absl::Status RequireRole(const Caller& caller, TenantRole role,
                                         absl::string_view what) const;
  // Authenticate, then RequireRole: the whole check of a call that names
  // no namespace, or of a batch before its items.
  [[nodiscard]] absl::StatusOr<Caller> Authorize(
      const grpc::ServerContextBase& context, TenantRole role,
      absl::string_view what) const;
  // A bearer token presented outside gRPC (the peer plane's hello): OK when
  // auth is off or its tenant has `role`, else PERMISSION_DENIED saying
  // why. Counted in the refusal metrics like a call's token.
  [[nodiscard]] absl::Status CheckToken(absl::string_view token,
                                        TenantRole role) const;
  // PERMISSION_DENIED unless `ns` is within the caller's prefixes.
  [[nodiscard]] absl::Status AllowNamespace(const Caller& caller,
                                            absl::string_view ns) const;

  // Admits a call of `requests` requests against the caller's limits (see
  // tenant_limiter.h); hold the handle until the call is answered. Always
  // admitted with auth off.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<void>> Admit(
      const Caller& caller, int requests) const;

  // The tenants' stored_bytes limit. RESOURCE_EXHAUSTED (kLimitPayload
  // "stored_bytes", a RetryInfo of kStoredBytesRetryMs) when the caller's
  // tenant stores at least its limit, as last measured by the watch below;
  // never while the store's figures are incomplete (the scan after a start),
  // nor with auth off. For calls that may store more (Begin, Complete and
  // their batches, `requests` items): what frees bytes (Forget, Release) and
  // reads stay allowed. Counted in dedup_tenant_limited_total.
  [[nodiscard]] absl::Status AdmitStoredBytes(const Caller& caller,
                                              int requests) const
      ABSL_LOCKS_EXCLUDED(usage_mu_);
  // Every `interval`, on a thread of its own, sums `source`'s bytes per
  // namespace over each tenant's prefixes (a namespace within several of a
  // tenant's prefixes counts once) for AdmitStoredBytes and the gauge
  // dedup_tenant_stored_bytes{tenant}. At most once; `source` must stay
  // callable until StopStoredBytesWatch (or destruction). No-op with auth
  // off.
  void WatchStoredBytes(absl::AnyInvocable<StoredBytes()> source,
                        absl::Duration interval) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops that thread (before `source`'s store goes). Idempotent.
  void StopStoredBytesWatch() ABSL_LOCKS_EXCLUDED(mu_);
  // Measures once now (what the watch does each interval).
  void UpdateStoredBytes(const StoredBytes& bytes)
      ABSL_LOCKS_EXCLUDED(usage_mu_);

  // Re-reads the tenants file. On error the tables in use stay as they were
  // and the error (file, line, field) is returned and logged. No-op when
  // auth is off.
  absl::Status Reload() ABSL_LOCKS_EXCLUDED(mu_);
  // Reloads whenever the file's contents change, checking every `interval`
  // on a thread of its own (for rotation without SIGHUP). At most once.
  void WatchFile(absl::Duration interval) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Authorizer(std::string path, std::shared_ptr<const TenantTable> table,
             std::string contents, prometheus::Registry* registry,
             AuthFailureLimits failures);
  void Refuse(Refusal reason) const;
  // Refuse for a failed authentication, spending a failure of the caller's
  // address: `peer` (context.peer(), or "" when not read yet).
  void RefuseLogin(Refusal reason, const grpc::ServerContextBase& context,
                   const std::string& peer) const;
  std::shared_ptr<const TenantTable> table() const ABSL_LOCKS_EXCLUDED(mu_);

  const std::string path_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const TenantTable> table_ ABSL_GUARDED_BY(mu_);
  // The text the table was parsed from: the watcher reloads on a change.
  std::string contents_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
  mutable TenantLimiter limiter_{RealClock()};
  mutable AuthFailureLimiter failures_;
  bool stop_bytes_watch_ ABSL_GUARDED_BY(mu_) = false;
  std::thread bytes_watcher_;
  // Bytes stored per tenant name, as last measured; empty while the figures
  // are incomplete.
  mutable absl::Mutex usage_mu_;
  absl::flat_hash_map<std::string, uint64_t> usage_ ABSL_GUARDED_BY(usage_mu_);
  absl::flat_hash_map<std::string, prometheus::Gauge*> stored_gauges_
      ABSL_GUARDED_BY(usage_mu_);
  prometheus::Family<prometheus::Gauge>* stored_bytes_ = nullptr;

  std::array<prometheus::Counter*, kRefusalCount> refusals_{};
  prometheus::Family<prometheus::Counter>* limited_ = nullptr;
  prometheus::Counter* reloads_ok_ = nullptr;
  prometheus::Counter* reloads_failed_ = nullptr;
  prometheus::Gauge* tenants_ = nullptr;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_AUTH_H_
