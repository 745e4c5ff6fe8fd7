// dedup.v1.Admin: statistics and on-demand compaction for operators.
#ifndef DEDUP_SERVER_ADMIN_SERVICE_H_
#define DEDUP_SERVER_ADMIN_SERVICE_H_

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

#include "dedup/v1/admin.grpc.pb.h"
#include "server/auth.h"
#include "server/backup_source.h"
#include "server/lame_duck.h"
#include "server/metrics.h"
#include "server/namespace_policy.h"
#include "server/rpc_call.h"
#include "server/task_threads.h"
#include "storage/store.h"

namespace dedup {

struct BuildInfo {
  std::string version;
  std::string git_sha;
  std::string durability;
};

// Thread-safe. Does not own `store`, `metrics` or `auth`; they must outlive
// every call. Every call needs the operator role. Compaction runs on a thread
// of its own: never on gRPC's few callback threads.
class AdminService final : public v1::Admin::CallbackService {
 public:
  // `policies` (not owned; null: none) must outlive every call.
  AdminService(Store* store, Metrics* metrics, const Authorizer* auth,
               BuildInfo build, PolicyFile* policies = nullptr);

  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context,
                                  const v1::StatsRequest* request,
                                  v1::StatsResponse* response) override;
  grpc::ServerUnaryReactor* Compact(grpc::CallbackServerContext* context,
                                    const v1::CompactRequest* request,
                                    v1::CompactResponse* response) override;
  grpc::ServerUnaryReactor* ReloadPolicy(
      grpc::CallbackServerContext* context,
      const v1::ReloadPolicyRequest* request,
      v1::ReloadPolicyResponse* response) override;
  grpc::ServerUnaryReactor* GetPolicy(grpc::CallbackServerContext* context,
                                      const v1::GetPolicyRequest* request,
                                      v1::GetPolicyResponse* response) override;

  // Streams a backup (see admin.proto). FAILED_PRECONDITION until
  // EnableBackup.
  grpc::ServerWriteReactor<v1::BackupChunk>* Backup(
      grpc::CallbackServerContext* context,
      const v1::BackupRequest* request) override;

  // Lets Backup copy from `source` (whose pointers must outlive every
  // call); removes a single node's scratch copy a stopped process left.
  // Call before the service is registered.
  void EnableBackup(BackupSource source);

  // From now on new calls are answered UNAVAILABLE (see lame_duck.h).
  void EnterLameDuck();
  // Waits for the compactions still running. Call it after the gRPC server
  // has shut down.
  void JoinTasks();

 private:
  // True (and the call finished) unless the caller is an operator and the
  // server is not in its lame duck.
  bool Refused(const RpcCall& call, const grpc::CallbackServerContext& context,
               absl::string_view what) const;

  Store* const store_;
  Metrics* const metrics_;
  const Authorizer* const auth_;
  const BuildInfo build_;
  PolicyFile* const policies_;
  const std::chrono::steady_clock::time_point started_;
  std::atomic<bool> compacting_{false};
  std::optional<BackupSource> backup_source_;
  std::atomic<bool> backing_up_{false};
  LameDuck lame_duck_;
  // Last: its destructor joins threads that use the members above.
  TaskThreads tasks_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_ADMIN_SERVICE_H_
