#include "storage/clock.h"

#include <chrono>

namespace dedup {
namespace {

class SystemClock : public Clock {
 public:
  int64_t NowMillis() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace

const Clock* RealClock() {
  static const SystemClock* const clock = new SystemClock();
  return clock;
}

}  // namespace dedup
