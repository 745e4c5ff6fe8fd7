#include "server/serving_priority.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace dedup {
namespace {

class ServingPriorityFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ServingPriorityFactory(int nice) : nice_(nice) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* /*info*/) override {
    // Once per thread: every later call on it costs one branch.
    thread_local bool lowered = false;
    if (!lowered) {
      lowered = true;
      const int error = SetThisThreadNice(nice_);
      if (error != 0 && !warned_.exchange(true)) {
        LogWarning("cannot lower the priority of gRPC's threads to nice ",
                   nice_, ": ", std::strerror(error),
                   "; Raft may then lose leaders when the CPU runs short");
      }
    }
    return nullptr;
  }

 private:
  const int nice_;
  std::atomic<bool> warned_{false};
};

}  // namespace

int SetThisThreadNice(int nice) {
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  return setpriority(PRIO_PROCESS, tid, nice) == 0 ? 0 : errno;
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
ServingPriorityInterceptor(int nice) {
  if (nice <= 0) return nullptr;
  return std::make_unique<ServingPriorityFactory>(nice);
}

}  // namespace dedup
