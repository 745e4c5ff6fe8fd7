// Deferred functions ordered by due time. TimerHeap is the bare data
// structure (owned by one thread); TimerThread runs due functions on a thread
// of its own, for backends whose calls may be issued from anywhere (gRPC).
#ifndef DEDUP_BENCH_LOAD_TIMERS_H_
#define DEDUP_BENCH_LOAD_TIMERS_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "bench/load/backend.h"

namespace dedup::bench {

class TimerHeap {
 public:
  void Add(Clock::time_point when, std::function<void()> fn);
  bool empty() const { return heap_.empty(); }
  Clock::time_point next() const { return heap_.top().when; }
  // Moves every function due at `now` into `out`.
  void TakeDue(Clock::time_point now, std::vector<std::function<void()>>* out);

 private:
  struct Entry {
    Clock::time_point when;
    uint64_t seq;  // FIFO among equal times
    std::function<void()> fn;
    bool operator>(const Entry& o) const {
      return when != o.when ? when > o.when : seq > o.seq;
    }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_;
  uint64_t seq_ = 0;
};

class TimerThread {
 public:
  TimerThread();
  ~TimerThread();
  void Add(Clock::time_point when, std::function<void()> fn);

 private:
  void Loop();
  std::mutex mu_;
  std::condition_variable cv_;
  TimerHeap heap_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LOAD_TIMERS_H_
