// Time source for the authority. Every decision about leases and expiry reads
// the clock through this interface so tests can inject time instead of
// sleeping.
#ifndef DEDUP_STORAGE_CLOCK_H_
#define DEDUP_STORAGE_CLOCK_H_

#include <atomic>
#include <cstdint>

namespace dedup {

// Thread-safe. Returns wall-clock time in Unix milliseconds.
class Clock {
 public:
  virtual ~Clock() = default;
  [[nodiscard]] virtual int64_t NowMillis() const = 0;
};

// The process-wide real clock. Never null; never deleted.
const Clock* RealClock();

// A clock that only moves when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(int64_t start_ms) : now_ms_(start_ms) {}
  int64_t NowMillis() const override { return now_ms_.load(); }
  void Advance(int64_t ms) { now_ms_.fetch_add(ms); }
  void Set(int64_t ms) { now_ms_.store(ms); }

 private:
  std::atomic<int64_t> now_ms_;
};

}  // namespace dedup

#endif  // DEDUP_STORAGE_CLOCK_H_
