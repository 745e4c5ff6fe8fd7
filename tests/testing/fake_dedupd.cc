// A stand-in for dedupd that exercises the harness without a real server.
// Echoes its arguments, then: --fake_exit=N exits N at once, --fake_hang never
// reports listening, otherwise it reports port 45678 and waits for
// SIGTERM/SIGINT, exiting 0.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) std::fprintf(stderr, "arg %s\n", argv[i]);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--fake_exit=", 12) == 0) {
      std::fprintf(stderr, "data dir is locked\n");
      return std::atoi(argv[i] + 12);
    }
    if (std::strcmp(argv[i], "--fake_hang") == 0) {
      while (true) pause();
    }
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  std::printf("to stdout\n");
  std::fflush(stdout);
  std::fprintf(stderr, "dedupd listening on 127.0.0.1:45678 (fake)\n");
  int sig = 0;
  sigwait(&stop, &sig);
  std::fprintf(stderr, "stopping on signal %d\n", sig);
  return 0;
}
