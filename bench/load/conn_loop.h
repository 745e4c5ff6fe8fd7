// One thread serving one pipelined client connection (Redis, PostgreSQL):
// a poll loop over the connection's socket, a wake pipe and a timer heap.
// Every call of a slot bound to the connection runs on this thread, so the
// (thread-unsafe) client library needs no lock, and many calls are in flight
// on the connection at once (pipelining), like the N outstanding gRPC calls
// multiplexed on a channel.
#ifndef DEDUP_BENCH_LOAD_CONN_LOOP_H_
#define DEDUP_BENCH_LOAD_CONN_LOOP_H_

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/load/backend.h"
#include "bench/load/timers.h"

namespace dedup::bench {

class ConnLoop {
 public:
  virtual ~ConnLoop();
  // Connects (on the caller's thread) and starts the loop thread.
  std::string Start();
  // Ends the loop once nothing is outstanding (or after a few seconds), then
  // joins it.
  void Stop();
  // Thread-safe. Runs fn on the loop thread at `when`.
  void Post(Clock::time_point when, std::function<void()> fn);

 protected:
  virtual std::string Connect() = 0;
  virtual int fd() = 0;
  // True while buffered requests wait to be written.
  virtual bool WantWrite() = 0;
  // Writes what the socket takes now. Empty string on success.
  virtual std::string Flush() = 0;
  // Reads what arrived and answers every complete reply.
  virtual std::string OnReadable() = 0;
  // True when no request is waiting for its reply.
  virtual bool Idle() = 0;
  // Fails every outstanding request with `error` (the connection is broken).
  virtual void FailAll(const std::string& error) = 0;

 private:
  void Loop();

  std::mutex mu_;
  std::vector<std::pair<Clock::time_point, std::function<void()>>> incoming_;
  bool stop_ = false;
  int wake_[2] = {-1, -1};
  TimerHeap timers_;  // loop thread only
  std::atomic<std::thread::id> loop_id_{};
  std::thread thread_;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LOAD_CONN_LOOP_H_
