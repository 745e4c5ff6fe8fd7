// dedup.v1.Admin: statistics and on-demand compaction for operators.
#ifndef DEDUP_SERVER_ADMIN_SERVICE_H_
#define DEDUP_SERVER_ADMIN_SERVICE_H_

#include <atomic>
#include <chrono>
#include <string>

#include "dedup/v1/admin.grpc.pb.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/namespace_policy.h"
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

 private:
  Store* const store_;
  Metrics* const metrics_;
  const Authorizer* const auth_;
  const BuildInfo build_;
  PolicyFile* const policies_;
  const std::chrono::steady_clock::time_point started_;
  std::atomic<bool> compacting_{false};
};

}  // namespace dedup

#endif  // DEDUP_SERVER_ADMIN_SERVICE_H_
