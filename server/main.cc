// dedupd: the idempotency authority on one node (see server/daemon.h).
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/exit_codes.h"
#include "common/flag_syntax.h"
#include "common/log.h"
#include "common/version.h"
#include "server/daemon.h"
#include "server/exit_status.h"
#include "server/grpc_log.h"
#include "server/process_exit.h"
#include "server/server_config.h"
#include "server/usage.h"

int main(int argc, char** argv) {
  dedup::RouteGrpcLogs();
  dedup::ConfigureUsage();
  // ParseCommandLine would exit 1 on a bad flag; we promise 2.
  if (absl::Status s = dedup::CheckFlagSyntax(argc, argv); !s.ok()) {
    dedup::LogError(s.message(), " (see --help)");
    return dedup::exit_code::kBadFlags;
  }
  absl::ParseCommandLine(argc, argv);
  dedup::ApplyLogFormatFlag();
  // Debian's Abseil checks every mutex acquisition for lock-order cycles;
  // that costs a few percent of each request and the tests cover ordering.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  dedup::Daemon daemon({dedup::ProjectVersion(), dedup::GitSha()});
  if (absl::Status started = daemon.Start(); !started.ok()) {
    dedup::LogError(started.message());
    return dedup::ExitCodeOf(started);
  }
  daemon.Serve();
  absl::Status stopped = daemon.Stop();
  if (!stopped.ok()) dedup::LogError(stopped.message());
  // Not a return: destroying `daemon` would shut its gRPC server down, which
  // cancels the calls arriving meanwhile (see Daemon::Stop).
  dedup::ExitProcess(dedup::ExitCodeOf(stopped));
}
