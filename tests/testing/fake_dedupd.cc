// A stand-in for dedupd that exercises the harness without a real server.
// Echoes its arguments, then: --fake_exit=N exits N at once, --fake_hang never
// becomes ready, otherwise it writes its --ready_file (address
// 127.0.0.1:45678, metrics 127.0.0.1:45679; after --fake_ready_delay_ms=N)
// as dedupd does (temp file, rename) and waits for SIGTERM/SIGINT, exiting 0.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

// The same JSON object dedupd writes (server/ready_file.h).
bool WriteReadyFile(const std::string& path) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(f,
               "{\"pid\":%d,\"mode\":\"single\",\"node_id\":0,"
               "\"address\":\"127.0.0.1:45678\","
               "\"metrics_address\":\"127.0.0.1:45679\","
               "\"health_address\":\"\",\"raft_address\":\"\","
               "\"data_dir\":\"\",\"durability\":\"none\",\"tls\":\"off\","
               "\"auth\":\"off\",\"version\":\"fake\"}\n",
               static_cast<int>(getpid()));
  return std::fclose(f) == 0 && std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string ready_file;
  int ready_delay_ms = 0;
  for (int i = 1; i < argc; ++i) std::fprintf(stderr, "arg %s\n", argv[i]);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--fake_exit=", 12) == 0) {
      std::fprintf(stderr, "data dir is locked\n");
      return std::atoi(argv[i] + 12);
    }
    if (std::strcmp(argv[i], "--fake_hang") == 0) {
      while (true) pause();
    }
    if (std::strncmp(argv[i], "--ready_file=", 13) == 0) {
      ready_file = argv[i] + 13;
    }
    if (std::strncmp(argv[i], "--fake_ready_delay_ms=", 22) == 0) {
      ready_delay_ms = std::atoi(argv[i] + 22);
    }
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  std::printf("to stdout\n");
  std::fflush(stdout);
  usleep(ready_delay_ms * 1000);
  if (!ready_file.empty() && !WriteReadyFile(ready_file)) {
    std::fprintf(stderr, "cannot write %s\n", ready_file.c_str());
    return 4;
  }
  int sig = 0;
  sigwait(&stop, &sig);
  std::fprintf(stderr, "stopping on signal %d\n", sig);
  return 0;
}
