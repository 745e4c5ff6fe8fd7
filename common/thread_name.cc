#include "common/thread_name.h"

#include <pthread.h>

#include <string>

namespace dedup {

void NameThisThread(absl::string_view name) {
  // 16 bytes with the terminating NUL, or pthread_setname_np fails.
  const std::string cut(name.substr(0, 15));
  (void)pthread_setname_np(pthread_self(), cut.c_str());
}

}  // namespace dedup
