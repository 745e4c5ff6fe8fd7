#include "client/dedupctl_commands.h"

#include <type_traits>

#include "absl/status/statusor.h"
#include "client/dedupctl_format.h"

namespace dedup::ctl {
namespace {

// Complete, Release and Renew share the rule: only OK means the caller's
// fence was honoured; every other answer is a refusal worth a distinct code.
template <typename Response>
int Report(const absl::StatusOr<Response>& response, std::ostream& out,
           std::ostream& err) {
  if (!response.ok()) {
    err << "dedupctl: " << response.status().ToString() << "\n";
    return kExitRpcError;
  }
  PrintResponse(out, *response);
  if constexpr (std::is_same_v<Response, v1::CompleteResponse> ||
                std::is_same_v<Response, v1::ReleaseResponse> ||
                std::is_same_v<Response, v1::RenewResponse>) {
    if (response->status() != Response::OK) return kExitRejected;
  }
  return kExitOk;
}

}  // namespace

int RunInvocation(const Client& client, const Invocation& inv,
                  std::ostream& out, std::ostream& err) {
  switch (inv.command) {
    case Command::kBegin:
      return Report(client.Begin(inv.ns, inv.key, inv.args_hash, inv.begin),
                    out, err);
    case Command::kComplete:
      return Report(client.Complete(inv.ns, inv.key, inv.fence, inv.outcome,
                                    inv.result, inv.ttl_s),
                    out, err);
    case Command::kRelease:
      return Report(client.Release(inv.ns, inv.key, inv.fence), out, err);
    case Command::kRenew:
      return Report(client.Renew(inv.ns, inv.key, inv.fence, inv.lease_ms), out,
                    err);
    case Command::kGet:
      return Report(client.Get(inv.ns, inv.key), out, err);
    case Command::kForget:
      return Report(client.Forget(inv.ns, inv.key), out, err);
  }
  err << "dedupctl: unhandled command\n";
  return kExitUsage;
}

}  // namespace dedup::ctl
