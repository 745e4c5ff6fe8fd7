// Runs one parsed dedupctl Invocation against the authority and renders the
// answer. Thread-compatible; writes only to the given streams.
#ifndef DEDUP_CLIENT_DEDUPCTL_COMMANDS_H_
#define DEDUP_CLIENT_DEDUPCTL_COMMANDS_H_

#include <ostream>

#include "absl/time/time.h"
#include "client/dedup_client.h"
#include "client/dedupctl_cli.h"
#include "client/leader_router.h"
#include "dedup/v1/admin.grpc.pb.h"

namespace dedup::ctl {

// Prints the answer to `out` (or the gRPC error to `err`) and returns the
// exit code documented in dedupctl_cli.h. `admin` serves stats and compact;
// `cluster` (over the same addresses as `client`) the cluster commands.
// `options` are the client's: their deadline applies to admin calls too.
[[nodiscard]] int RunInvocation(const Client& client,
                                v1::Admin::StubInterface& admin,
                                LeaderRouter& cluster,
                                const ClientOptions& options,
                                const Invocation& inv, std::ostream& out,
                                std::ostream& err);

}  // namespace dedup::ctl

#endif  // DEDUP_CLIENT_DEDUPCTL_COMMANDS_H_
