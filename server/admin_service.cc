#include "server/admin_service.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "server/checkpoint_streamer.h"
#include "server/operator_call.h"
#include "server/proto_convert.h"
#include "server/rpc_call.h"

namespace dedup {
namespace {

// A backup refused before its first message, counted like a unary call.
class RefusedBackupStream final
    : public grpc::ServerWriteReactor<v1::BackupChunk> {
 public:
  RefusedBackupStream(const grpc::Status& status, Metrics* metrics) {
    metrics->CallStarted();
    metrics->RecordError(Method::kAdminBackup, status.error_code());
    metrics->ObserveDuration(Method::kAdminBackup, 0);
    metrics->CallFinished();
    Finish(status);
  }
  void OnDone() override { delete this; }
};

}  // namespace

AdminService::AdminService(Store* store, Metrics* metrics,
                           const Authorizer* auth, BuildInfo build,
                           PolicyFile* policies)
    : store_(store),
      metrics_(metrics),
      auth_(auth),
      build_(std::move(build)),
      policies_(policies),
      started_(std::chrono::steady_clock::now()) {}

grpc::ServerUnaryReactor* AdminService::ReloadPolicy(
    grpc::CallbackServerContext* context,
    const v1::ReloadPolicyRequest* /*request*/,
    v1::ReloadPolicyResponse* response) {
  RpcCall call(context, Method::kAdminReloadPolicy, metrics_);
  if (Refused(call, *context, "Admin.ReloadPolicy")) return call.reactor();
  absl::Status s;
  if (policies_ == nullptr || policies_->path().empty()) {
    s = absl::FailedPreconditionError(
        "no --policy_file: the flags apply to every namespace");
  }
  // A small file read on a callback thread: operator-only and rare.
  if (s.ok()) s = policies_->Reload();
  if (s.ok()) {
    response->set_policies(static_cast<uint32_t>(policies_->Current()->size()));
  }
  call.Fail(s);
  return call.reactor();
}

grpc::ServerUnaryReactor* AdminService::GetPolicy(
    grpc::CallbackServerContext* context, const v1::GetPolicyRequest* request,
    v1::GetPolicyResponse* response) {
  RpcCall call(context, Method::kAdminGetPolicy, metrics_);
  if (Refused(call, *context, "Admin.GetPolicy")) return call.reactor();
  EffectivePolicy p;
  if (policies_ != nullptr) {
    p = policies_->Current()->For(request->namespace_());
  } else {
    p.limits = PolicyTable(Limits()).For("").limits;
  }
  response->set_policy(p.name);
  response->set_prefix(p.prefix);
  response->set_default_ttl_s(p.limits.default_ttl_s);
  response->set_max_ttl_s(p.limits.max_ttl_s);
  response->set_default_lease_ms(p.limits.default_lease_ms);
  response->set_max_lease_ms(p.limits.max_lease_ms);
  response->set_max_result_bytes(p.limits.max_result_bytes);
  response->set_tombstone_retention_s(p.limits.tombstone_retention_s);
  response->set_on_error(p.retry_errors ? "retry" : "replay");
  call.Finish(grpc::Status::OK);
  return call.reactor();
}

grpc::ServerUnaryReactor* AdminService::Stats(
    grpc::CallbackServerContext* context, const v1::StatsRequest* /*request*/,
    v1::StatsResponse* response) {
  RpcCall call(context, Method::kAdminStats, metrics_);
  if (Refused(call, *context, "Admin.Stats")) return call.reactor();
  const StoreStats s = store_->Stats();
  response->set_version(build_.version);
  response->set_git_sha(build_.git_sha);
  response->set_durability(build_.durability);
  response->set_uptime_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - started_)
                              .count());
  response->set_estimated_records(s.estimated_records);
  response->set_inflight_leases(s.inflight_leases);
  response->set_lapsed_leases(s.lapsed_leases);
  response->set_oldest_lapsed_lease_ms(s.oldest_lapsed_lease_ms);
  response->set_waiting_begins(s.waiting_begins);
  response->set_expired_dropped(s.expired_dropped);
  response->set_tombstones_made(s.tombstones_made);
  response->set_tombstones_dropped(s.tombstones_dropped);
  response->set_live_sst_bytes(s.live_sst_bytes);
  response->set_pending_compaction_bytes(s.pending_compaction_bytes);
  response->set_block_cache_usage_bytes(s.block_cache_usage_bytes);
  response->set_memtable_bytes(s.memtable_bytes);
  for (int i = 0; i < kBeginOutcomeCount; ++i) {
    const auto outcome = static_cast<BeginOutcome>(i);
    (*response->mutable_begin_outcomes())[BeginOutcomeName(outcome)] =
        static_cast<uint64_t>(metrics_->BeginCount(outcome));
  }
  call.Finish(grpc::Status::OK);
  return call.reactor();
}

grpc::ServerUnaryReactor* AdminService::Compact(
    grpc::CallbackServerContext* context, const v1::CompactRequest* /*request*/,
    v1::CompactResponse* response) {
  RpcCall call(context, Method::kAdminCompact, metrics_);
  if (Refused(call, *context, "Admin.Compact")) return call.reactor();
  if (compacting_.exchange(true)) {
    call.Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                             "a compaction is already running"));
    return call.reactor();
  }
  tasks_.Start([this, call, response] {
    const auto start = std::chrono::steady_clock::now();
    const uint64_t dropped_before = store_->Stats().expired_dropped;
    const absl::Status status = store_->CompactAll();
    response->set_expired_dropped(store_->Stats().expired_dropped -
                                  dropped_before);
    response->set_duration_ms(
        std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - start)
            .count());
    compacting_.store(false);
    call.Fail(status);
  });
  return call.reactor();
}

grpc::ServerWriteReactor<v1::BackupChunk>* AdminService::Backup(
    grpc::CallbackServerContext* context,
    const v1::BackupRequest* /*request*/) {
  absl::Status allowed =
      auth_->Authorize(*context, TenantRole::kOperator, "Admin.Backup")
          .status();
  if (allowed.ok()) allowed = lame_duck_.Check();
  if (allowed.ok() && !backup_source_.has_value()) {
    allowed = absl::FailedPreconditionError("this server makes no backups");
  }
  if (allowed.ok() && backing_up_.exchange(true)) {
    allowed = absl::ResourceExhaustedError("a backup is already running");
  }
  if (!allowed.ok()) {
    return new RefusedBackupStream(ToGrpcStatus(allowed), metrics_);
  }
  return StartBackupStream(
      [source = *backup_source_](v1::BackupInfo* info) {
        return MakeBackup(source, info);
      },
      [this] { backing_up_.store(false); }, metrics_, &tasks_);
}

void AdminService::EnableBackup(BackupSource source) {
  // A copy left by a backup the process did not finish holds hard links to
  // tables the database may have dropped since: free them now.
  if (!source.scratch_dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(source.scratch_dir, ignored);
  }
  backup_source_ = std::move(source);
}

void AdminService::EnterLameDuck() { lame_duck_.Enter(); }

void AdminService::JoinTasks() { tasks_.JoinAll(); }

bool AdminService::Refused(const RpcCall& call,
                           const grpc::CallbackServerContext& context,
                           absl::string_view what) const {
  return RefusedOperatorCall(call, *auth_, lame_duck_, context, what);
}

}  // namespace dedup
