// Admission of the operator-only services' calls (Admin, Cluster): one rule
// for both, so they refuse alike.
#ifndef DEDUP_SERVER_OPERATOR_CALL_H_
#define DEDUP_SERVER_OPERATOR_CALL_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"
#include "server/auth.h"
#include "server/lame_duck.h"
#include "server/rpc_call.h"

namespace dedup {

// True (and `call` finished with the reason) when the caller is not an
// operator for `what` ("Admin.Stats"...) or the server is in its lame duck.
// The credential is judged first, so a refusal never says whether the
// server is stopping.
inline bool RefusedOperatorCall(const RpcCall& call, const Authorizer& auth,
                                const LameDuck& lame_duck,
                                const grpc::CallbackServerContext& context,
                                absl::string_view what) {
  if (call.Refused(
          auth.Authorize(context, TenantRole::kOperator, what).status())) {
    return true;
  }
  if (absl::Status serving = lame_duck.Check(); !serving.ok()) {
    call.Fail(serving);
    return true;
  }
  return false;
}

}  // namespace dedup

#endif  // DEDUP_SERVER_OPERATOR_CALL_H_
