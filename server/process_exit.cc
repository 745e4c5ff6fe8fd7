#include "server/process_exit.h"

#include <cstdio>
#include <cstdlib>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define DEDUP_LEAK_CHECK 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define DEDUP_LEAK_CHECK 1
#endif
#ifdef DEDUP_LEAK_CHECK
#include <sanitizer/lsan_interface.h>
#endif

namespace dedup {

void ExitProcess(int code) {
  std::fflush(nullptr);
#ifdef DEDUP_LEAK_CHECK
  // _Exit skips the check LeakSanitizer runs at exit; what is still in use
  // (the daemon, its gRPC server) is reachable and not reported.
  __lsan_do_leak_check();
#endif
  std::_Exit(code);
}

}  // namespace dedup
