// dedupd: the idempotency authority on one node.
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/flag_syntax.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "server/dedup_service.h"
#include "server/server_config.h"

ABSL_DECLARE_FLAG(std::string, durability);
#include "storage/store.h"

namespace {

// Exit codes, documented in --help.
constexpr int kExitBadFlags = 2;
constexpr int kExitDataDir = 3;
constexpr int kExitListen = 4;
constexpr int kExitShutdownError = 1;

// Headroom over the result limit for the rest of a CompleteRequest.
constexpr int kMessageOverheadBytes = 64 << 10;

void Log(const std::string& line) {
  std::fprintf(stderr, "dedupd: %s\n", line.c_str());
  std::fflush(stderr);
}

// Refuses a data dir that exists but is not a directory, or cannot be made.
bool PrepareDataDir(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) &&
      !std::filesystem::is_directory(path, ec)) {
    Log(absl::StrCat("data dir ", path, " exists and is not a directory"));
    return false;
  }
  std::filesystem::create_directories(path, ec);
  if (ec) {
    Log(absl::StrCat("cannot create data dir ", path, ": ", ec.message()));
    return false;
  }
  return true;
}

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "dedupd: the dedup idempotency authority (gRPC dedup.v1.Dedup).\n"
      "Exit codes: 0 clean stop, 1 error while stopping, 2 bad flags, 3 data "
      "dir unusable or locked by another dedupd, 4 cannot listen.");
  // ParseCommandLine would exit 1 on a bad flag; we promise 2.
  if (absl::Status s = dedup::CheckFlagSyntax(argc, argv); !s.ok()) {
    Log(absl::StrCat(s.message(), " (see --help)"));
    return kExitBadFlags;
  }
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<dedup::ServerConfig> config = dedup::ServerConfigFromFlags();
  if (!config.ok()) {
    Log(std::string(config.status().message()));
    return kExitBadFlags;
  }

  // Signals are taken synchronously by main (sigwait), so every thread
  // started from here on must have them blocked.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (!PrepareDataDir(config->store.path)) return kExitDataDir;
  absl::StatusOr<std::unique_ptr<dedup::Store>> store =
      dedup::Store::Open(config->store);
  if (!store.ok()) {
    Log(std::string(store.status().message()));
    return kExitDataDir;
  }

  dedup::DedupService service(store->get(), config->limits);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config->address, grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(
      std::max<int>(4 << 20, static_cast<int>(config->limits.max_result_bytes) +
                                 kMessageOverheadBytes));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    Log(absl::StrCat("cannot listen on ", config->address,
                     " (address in use or invalid?)"));
    return kExitListen;
  }
  // Tests and scripts wait for this exact line to learn the port.
  std::fprintf(
      stderr, "dedupd listening on %s:%d (data_dir=%s durability=%s)\n",
      HostOf(config->address).c_str(), port, config->store.path.c_str(),
      absl::GetFlag(FLAGS_durability).c_str());
  std::fflush(stderr);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  Log(absl::StrCat("received ", strsignal(signal_number),
                   ", draining in-flight calls"));
  server->GetHealthCheckService()->Shutdown();
  // Parked Begins would otherwise hold the drain for up to their wait_ms.
  (*store)->DrainWaiters();
  server->Shutdown(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(config->shutdown_grace_ms));
  server->Wait();
  if (absl::Status s = (*store)->Close(); !s.ok()) {
    Log(absl::StrCat("error closing the store: ", s.message()));
    return kExitShutdownError;
  }
  Log("stopped cleanly");
  return 0;
}
