#include "client/dedupctl_commands.h"

#include <algorithm>
#include <type_traits>

#include "absl/status/statusor.h"
#include "client/dedupctl_backup.h"
#include "client/dedupctl_cluster.h"
#include "client/dedupctl_format.h"
#include "client/dedupctl_output.h"
#include "client/dedupctl_shards.h"
#include "grpcpp/client_context.h"

namespace dedup::ctl {
namespace {

// Complete, Release and Renew share the rule: only OK means the caller's
// fence was honoured; every other answer is a refusal worth a distinct code.
template <typename Response>
int Report(const absl::StatusOr<Response>& response, OutputFormat format,
           std::ostream& out, std::ostream& err) {
  if (!response.ok()) {
    return PrintError(format, err, response.status(), kExitRpcError);
  }
  if (format == OutputFormat::kJson) {
    PrintJson(out, *response);
  } else {
    PrintResponse(out, *response);
  }
  if constexpr (std::is_same_v<Response, v1::CompleteResponse> ||
                std::is_same_v<Response, v1::ReleaseResponse> ||
                std::is_same_v<Response, v1::RenewResponse> ||
                std::is_same_v<Response, v1::CheckpointResponse>) {
    if (response->status() != Response::OK) return kExitRejected;
  }
  return kExitOk;
}

// Admin calls are operator one-shots: one attempt, no retries.
template <typename Request, typename Response, typename Call>
absl::StatusOr<Response> AdminCall(absl::Duration deadline, Call call,
                                   const Request& request = Request()) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  Response response;
  const grpc::Status status = call(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
  }
  return response;
}

}  // namespace

int RunInvocation(const Client& client, v1::Admin::StubInterface& admin,
                  LeaderRouter& cluster, const ClientOptions& options,
                  const Invocation& inv, std::ostream& out, std::ostream& err) {
  const absl::Duration deadline = options.deadline;
  switch (inv.command) {
    case Command::kBegin:
      return Report(client.Begin(inv.ns, inv.key, inv.args_hash, inv.begin),
                    inv.output, out, err);
    case Command::kComplete:
      return Report(client.Complete(inv.ns, inv.key, inv.fence, inv.outcome,
                                    inv.result, inv.ttl_s),
                    inv.output, out, err);
    case Command::kRelease:
      return Report(client.Release(inv.ns, inv.key, inv.fence), inv.output, out,
                    err);
    case Command::kRenew:
      return Report(client.Renew(inv.ns, inv.key, inv.fence, inv.lease_ms),
                    inv.output, out, err);
    case Command::kCheckpoint:
      return Report(client.Checkpoint(inv.ns, inv.key, inv.fence, inv.step,
                                      inv.data, inv.lease_ms),
                    inv.output, out, err);
    case Command::kGet:
      return Report(client.Get(inv.ns, inv.key), inv.output, out, err);
    case Command::kForget:
      return Report(client.Forget(inv.ns, inv.key), inv.output, out, err);
    case Command::kStats:
      return Report(
          AdminCall<v1::StatsRequest, v1::StatsResponse>(
              deadline, [&](auto* c, const auto& req,
                            auto* resp) { return admin.Stats(c, req, resp); }),
          inv.output, out, err);
    case Command::kCompact:
      // Compaction of a large store takes a while: allow minutes.
      return Report(AdminCall<v1::CompactRequest, v1::CompactResponse>(
                        std::max(deadline, absl::Minutes(10)),
                        [&](auto* c, const auto& req, auto* resp) {
                          return admin.Compact(c, req, resp);
                        }),
                    inv.output, out, err);
    case Command::kPolicy: {
      v1::GetPolicyRequest request;
      request.set_namespace_(inv.ns);
      return Report(AdminCall<v1::GetPolicyRequest, v1::GetPolicyResponse>(
                        deadline,
                        [&](auto* c, const auto& req, auto* resp) {
                          return admin.GetPolicy(c, req, resp);
                        },
                        request),
                    inv.output, out, err);
    }
    case Command::kReloadPolicy:
      return Report(
          AdminCall<v1::ReloadPolicyRequest, v1::ReloadPolicyResponse>(
              deadline,
              [&](auto* c, const auto& req, auto* resp) {
                return admin.ReloadPolicy(c, req, resp);
              }),
          inv.output, out, err);
    case Command::kBackup:
      return RunBackupCommand(cluster, inv.dir, inv.output, out, err);
    case Command::kClusterStatus:
    case Command::kClusterAdd:
    case Command::kClusterRemove:
    case Command::kClusterTransfer:
    case Command::kClusterMove:
    case Command::kClusterRecover:
      return RunClusterCommand(cluster, options, inv, out, err);
    case Command::kClusterShards:
    case Command::kClusterNodes:
      return RunShardsCommand(cluster, options, inv, out, err);
  }
  err << "dedupctl: unhandled command\n";
  return kExitUsage;
}

}  // namespace dedup::ctl
