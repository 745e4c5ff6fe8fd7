#include "server/auth.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "grpc/grpc_security_constants.h"
#include "prometheus/family.h"

namespace dedup {
namespace {

constexpr const char* kRefusalNames[kRefusalCount] = {
    "no_credential", "unknown_token", "unknown_certificate",
    "role",          "namespace",     "too_many_failures"};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read tenants file ", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(
        absl::StrCat("error reading tenants file ", path));
  }
  return text.str();
}

absl::StatusOr<std::shared_ptr<const TenantTable>> ParseFile(
    const std::string& path, const std::string& contents) {
  absl::StatusOr<TenantTable> table = TenantTable::Parse(contents);
  if (!table.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", table.status().message()));
  }
  return std::make_shared<const TenantTable>(*std::move(table));
}

// The token of "authorization: Bearer <token>", or empty.
absl::string_view BearerToken(const grpc::ServerContextBase& context,
                              bool* present) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  *present = it != metadata.end();
  if (!*present) return {};
  absl::string_view value(it->second.data(), it->second.size());
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return {};
  }
  return absl::StripAsciiWhitespace(value.substr(kScheme.size()));
}

std::string TenantRoleName(TenantRole role) {
  return role == TenantRole::kOperator ? "operator" : "client";
}

}  // namespace

Authorizer::Authorizer(prometheus::Registry* registry)
    : Authorizer("", nullptr, "", registry, AuthFailureLimits{}) {}

Authorizer::Authorizer(std::string path,
                       std::shared_ptr<const TenantTable> table,
                       std::string contents, prometheus::Registry* registry,
                       AuthFailureLimits failures)
    : path_(std::move(path)),
      table_(std::move(table)),
      contents_(std::move(contents)),
      failures_(failures, RealClock()) {
  auto& refusals = prometheus::BuildCounter()
                       .Name("dedup_auth_refusals_total")
                       .Help(
                           "Calls refused by authentication or "
                           "authorization, by reason")
                       .Register(*registry);
  for (int i = 0; i < kRefusalCount; ++i) {
    refusals_[i] = &refusals.Add({{"reason", kRefusalNames[i]}});
  }
  limited_ = &prometheus::BuildCounter()
                  .Name("dedup_tenant_limited_total")
                  .Help(
                      "Requests refused RESOURCE_EXHAUSTED because their "
                      "tenant was over a limit of the tenants file, by "
                      "tenant and limit (rps, inflight, stored_bytes; "
                      "batch items count one each)")
                  .Register(*registry);
  auto& reloads = prometheus::BuildCounter()
                      .Name("dedup_tenants_reloads_total")
                      .Help(
                          "Reloads of the tenants file, by result (a "
                          "failed one keeps the tenants in use)")
                      .Register(*registry);
  reloads_ok_ = &reloads.Add({{"result", "ok"}});
  reloads_failed_ = &reloads.Add({{"result", "error"}});
  tenants_ = &prometheus::BuildGauge()
                  .Name("dedup_tenants")
                  .Help("Tenants in use (0 with authentication off)")
                  .Register(*registry)
                  .Add({});
  tenants_->Set(table_ == nullptr ? 0 : table_->tenants().size());
  stored_bytes_ = &prometheus::BuildGauge()
                       .Name("dedup_tenant_stored_bytes")
                       .Help(
                           "Key and value bytes of the records in each "
                           "tenant's namespaces, as its stored_bytes limit "
                           "counts them (set once the scan after a start "
                           "has counted every record)")
                       .Register(*registry);
}

absl::StatusOr<std::unique_ptr<Authorizer>> Authorizer::FromFile(
    const std::string& path, prometheus::Registry* registry,
    AuthFailureLimits failures) {
  absl::StatusOr<std::string> contents = ReadFile(path);
  if (!contents.ok()) return contents.status();
  auto table = ParseFile(path, *contents);
  if (!table.ok()) return table.status();
  return std::unique_ptr<Authorizer>(new Authorizer(
      path, *std::move(table), *std::move(contents), registry, failures));
}

Authorizer::~Authorizer() {
  StopStoredBytesWatch();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
}

std::shared_ptr<const TenantTable> Authorizer::table() const {
  absl::MutexLock lock(&mu_);
  return table_;
}

void Authorizer::Refuse(Refusal reason) const {
  refusals_[static_cast<int>(reason)]->Increment();
}

absl::Status Authorizer::CheckToken(absl::string_view token,
                                    TenantRole role) const {
  if (!enabled()) return absl::OkStatus();
  // Held while `tenant` is read: a reload may replace the table meanwhile.
  const std::shared_ptr<const TenantTable> tenants = table();
  const Tenant* tenant = token.empty() ? nullptr : tenants->FindByToken(token);
  if (tenant == nullptr) {
    Refuse(token.empty() ? Refusal::kNoCredential : Refusal::kUnknownToken);
    return absl::PermissionDeniedError(
        token.empty() ? "no token" : "the token is not known");
  }
  if (!tenant->HasRole(role)) {
    Refuse(Refusal::kRole);
    return absl::PermissionDeniedError(absl::StrCat(
        "the token's tenant \"", tenant->name, "\" lacks the ",
        role == TenantRole::kOperator ? "operator" : "client", " role"));
  }
  return absl::OkStatus();
}

void Authorizer::RefuseLogin(Refusal reason,
                             const grpc::ServerContextBase& context,
                             const std::string& peer) const {
  Refuse(reason);
  failures_.RecordFailure(PeerAddress(peer.empty() ? context.peer() : peer));
}

absl::StatusOr<Caller> Authorizer::Authenticate(
    const grpc::ServerContextBase& context) const {
  if (!enabled()) return Caller();
  // Before any credential is looked at: an address over its failures costs
  // a lookup here, not a login attempt. (peer() only once one is tracked.)
  const std::string peer =
      failures_.peers() == 0 ? std::string() : context.peer();
  if (!peer.empty()) {
    if (absl::Status s = failures_.Check(PeerAddress(peer)); !s.ok()) {
      Refuse(Refusal::kTooManyFailures);
      return s;
    }
  }
  std::shared_ptr<const TenantTable> tenants = table();
  bool has_token = false;
  const absl::string_view token = BearerToken(context, &has_token);
  // A token, when sent, decides: a wrong one is refused even beside a good
  // certificate, so a misconfigured client learns of it.
  if (has_token) {
    const Tenant* tenant =
        token.empty() ? nullptr : tenants->FindByToken(token);
    if (tenant == nullptr) {
      RefuseLogin(Refusal::kUnknownToken, context, peer);
      return absl::UnauthenticatedError(
          token.empty() ? "authorization: expected \"Bearer <token>\""
                        : "authorization: the bearer token is not known");
    }
    return Caller(std::move(tenants), tenant);
  }
  std::vector<std::string> sans;
  if (std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
      auth != nullptr) {
    for (const grpc::string_ref& san :
         auth->FindPropertyValues(GRPC_X509_SAN_PROPERTY_NAME)) {
      sans.emplace_back(san.data(), san.size());
    }
  }
  if (sans.empty()) {
    RefuseLogin(Refusal::kNoCredential, context, peer);
    return absl::UnauthenticatedError(
        "no credential: send \"authorization: Bearer <token>\" metadata or a "
        "client certificate");
  }
  const Tenant* tenant = tenants->FindBySan(sans);
  if (tenant == nullptr) {
    RefuseLogin(Refusal::kUnknownCertificate, context, peer);
    return absl::UnauthenticatedError(
        absl::StrCat("the client certificate's names (",
                     absl::StrJoin(sans, ", "), ") are in no tenant"));
  }
  return Caller(std::move(tenants), tenant);
}

absl::Status Authorizer::RequireRole(const Caller& caller, TenantRole role,
                                     absl::string_view what) const {
  const Tenant* tenant = caller.tenant();
  if (tenant == nullptr || tenant->HasRole(role)) return absl::OkStatus();
  Refuse(Refusal::kRole);
  return absl::PermissionDeniedError(
      absl::StrCat(what, " needs the ", TenantRoleName(role),
                   " role; tenant \"", tenant->name, "\" does not have it"));
}

absl::StatusOr<Caller> Authorizer::Authorize(
    const grpc::ServerContextBase& context, TenantRole role,
    absl::string_view what) const {
  absl::StatusOr<Caller> caller = Authenticate(context);
  if (!caller.ok()) return caller.status();
  if (absl::Status s = RequireRole(*caller, role, what); !s.ok()) return s;
  return caller;
}

absl::Status Authorizer::AllowNamespace(const Caller& caller,
                                        absl::string_view ns) const {
  const Tenant* tenant = caller.tenant();
  if (tenant == nullptr || tenant->AllowsNamespace(ns)) {
    return absl::OkStatus();
  }
  Refuse(Refusal::kNamespace);
  // Names the rule, never the record: the same answer whether or not the
  // key exists.
  return absl::PermissionDeniedError(absl::StrCat(
      "namespace: \"", absl::CHexEscape(ns), "\" is not allowed for tenant \"",
      tenant->name, "\" (its namespace prefixes: ",
      tenant->namespace_prefixes.empty()
          ? "none"
          : absl::StrCat("\"",
                         absl::StrJoin(tenant->namespace_prefixes, "\", \""),
                         "\""),
      ")"));
}

absl::StatusOr<std::shared_ptr<void>> Authorizer::Admit(const Caller& caller,
                                                        int requests) const {
  if (caller.tenant() == nullptr) return nullptr;
  absl::StatusOr<std::shared_ptr<void>> admitted =
      limiter_.Admit(*caller.tenant(), requests);
  if (!admitted.ok()) {
    const auto limit = admitted.status().GetPayload(kLimitPayload);
    // Tenant names come from the operator's file: a bounded label set.
    limited_
        ->Add({{"tenant", caller.tenant()->name},
               {"limit", limit.has_value() ? std::string(*limit) : "other"}})
        .Increment(requests);
  }
  return admitted;
}

absl::Status Authorizer::AdmitStoredBytes(const Caller& caller,
                                          int requests) const {
  const Tenant* tenant = caller.tenant();
  if (tenant == nullptr || tenant->limits.stored_bytes == 0) {
    return absl::OkStatus();
  }
  uint64_t used = 0;
  {
    absl::ReaderMutexLock lock(&usage_mu_);
    auto it = usage_.find(tenant->name);
    if (it == usage_.end()) return absl::OkStatus();  // not measured (yet)
    used = it->second;
  }
  if (used < tenant->limits.stored_bytes) return absl::OkStatus();
  absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
      "tenant \"", tenant->name, "\" is over its limit of ",
      tenant->limits.stored_bytes, " stored bytes (uses ", used,
      "); nothing was written: records expire after their TTL, or Forget "
      "frees them; retry in ",
      kStoredBytesRetryMs, " ms"));
  status.SetPayload(kRetryDelayPayload,
                    absl::Cord(absl::StrCat(kStoredBytesRetryMs)));
  status.SetPayload(kLimitPayload, absl::Cord("stored_bytes"));
  limited_->Add({{"tenant", tenant->name}, {"limit", "stored_bytes"}})
      .Increment(requests);
  return status;
}

void Authorizer::UpdateStoredBytes(const StoredBytes& bytes) {
  if (!enabled()) return;
  std::shared_ptr<const TenantTable> tenants = table();
  absl::flat_hash_map<std::string, uint64_t> usage;
  if (bytes.complete) {
    for (const Tenant& tenant : tenants->tenants()) usage[tenant.name] = 0;
    for (const auto& [ns, stored] : bytes.by_namespace) {
      for (const Tenant& tenant : tenants->tenants()) {
        if (tenant.AllowsNamespace(ns)) {
          usage[tenant.name] += static_cast<uint64_t>(stored);
        }
      }
    }
  }
  absl::MutexLock lock(&usage_mu_);
  usage_.swap(usage);
  if (!bytes.complete) return;  // the gauges keep their last figures
  for (const auto& [name, used] : usage_) {
    prometheus::Gauge*& gauge = stored_gauges_[name];
    if (gauge == nullptr) gauge = &stored_bytes_->Add({{"tenant", name}});
    gauge->Set(static_cast<double>(used));
  }
  // Tenants gone from the file since: their series go too.
  for (auto it = stored_gauges_.begin(); it != stored_gauges_.end();) {
    if (usage_.contains(it->first)) {
      ++it;
    } else {
      stored_bytes_->Remove(it->second);
      stored_gauges_.erase(it++);
    }
  }
}

void Authorizer::WatchStoredBytes(absl::AnyInvocable<StoredBytes()> source,
                                  absl::Duration interval) {
  if (!enabled() || bytes_watcher_.joinable()) return;
  UpdateStoredBytes(source());
  bytes_watcher_ =
      std::thread([this, source = std::move(source), interval]() mutable {
        while (true) {
          {
            absl::MutexLock lock(&mu_);
            if (mu_.AwaitWithTimeout(absl::Condition(&stop_bytes_watch_),
                                     interval)) {
              return;
            }
          }
          UpdateStoredBytes(source());
        }
      });
}

void Authorizer::StopStoredBytesWatch() {
  {
    absl::MutexLock lock(&mu_);
    stop_bytes_watch_ = true;
  }
  if (bytes_watcher_.joinable()) bytes_watcher_.join();
}

absl::Status Authorizer::Reload() {
  if (!enabled()) return absl::OkStatus();
  absl::StatusOr<std::string> contents = ReadFile(path_);
  absl::StatusOr<std::shared_ptr<const TenantTable>> table =
      contents.ok() ? ParseFile(path_, *contents) : contents.status();
  if (!table.ok()) {
    reloads_failed_->Increment();
    Log(LogLevel::kWarning, "auth",
        absl::StrCat("tenants file not reloaded, the previous tenants stay "
                     "in use: ",
                     table.status().message()));
    return table.status();
  }
  size_t count = (*table)->tenants().size();
  {
    absl::MutexLock lock(&mu_);
    table_ = *std::move(table);
    contents_ = *std::move(contents);
  }
  reloads_ok_->Increment();
  tenants_->Set(count);
  Log(LogLevel::kInfo, "auth",
      absl::StrCat("tenants file ", path_, " loaded: ", count, " tenants"));
  return absl::OkStatus();
}

void Authorizer::WatchFile(absl::Duration interval) {
  if (!enabled() || watcher_.joinable()) return;
  watcher_ = std::thread([this, interval] {
    std::string failed_contents;  // a bad file is reported once, not per poll
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval)) {
          return;
        }
      }
      absl::StatusOr<std::string> now = ReadFile(path_);
      if (!now.ok() || *now == failed_contents) continue;
      bool changed;
      {
        absl::MutexLock lock(&mu_);
        changed = *now != contents_;
      }
      if (changed && !Reload().ok()) failed_contents = *now;
    }
  });
}

}  // namespace dedup
