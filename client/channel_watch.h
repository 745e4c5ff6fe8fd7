// Keeps client channels reconnecting while their server is away.
//
// A call on a channel in TRANSIENT_FAILURE fails at once, and the C++
// synchronous API polls the channel's sockets and timers only from inside a
// call. So while every call fails fast, nothing reacts to a reconnect
// attempt's result until gRPC's backup poller runs, every 5 s: a client whose
// dedupd restarted got its first answer 4.6 s after the server listened
// again (6.9 s after a 3 s outage), and a shorter reconnect backoff did not
// help. ChannelWatch keeps one thread waiting on the state of each channel
// it watches, as grpcio's channel.subscribe(try_to_connect=True) does (see
// client/python/dedup_client/routing.py): that thread polls, so attempts
// run on the reconnect backoff (common/reconnect_backoff.h), and an IDLE
// channel is asked to connect. Measured with tests/client/reconnect_test.cc.
//
// Thread-safe. The destructor returns once no watch is pending: at once for
// channels already destroyed (destroying a channel ends its watch), else
// within kWatchPeriod.
#ifndef DEDUP_CLIENT_CHANNEL_WATCH_H_
#define DEDUP_CLIENT_CHANNEL_WATCH_H_

#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/completion_queue.h"

namespace dedup {

class ChannelWatch {
 public:
  // How long one wait on a channel's state lasts before it is renewed.
  static constexpr absl::Duration kWatchPeriod = absl::Seconds(1);

  ChannelWatch() = default;
  ~ChannelWatch();

  ChannelWatch(const ChannelWatch&) = delete;
  ChannelWatch& operator=(const ChannelWatch&) = delete;

  // Watches `channel` (asking it to connect now) until it is destroyed or
  // this object is. Holds no reference to it. Starts the thread on first
  // use.
  void Watch(const std::shared_ptr<grpc::Channel>& channel);

 private:
  struct Watched;

  // Asks `watched`'s channel to connect if IDLE and waits for its next
  // state change (or kWatchPeriod); false once the channel is gone.
  bool ArmLocked(Watched* watched) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run();

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  grpc::CompletionQueue queue_;
  std::thread thread_;
};

}  // namespace dedup

#endif  // DEDUP_CLIENT_CHANNEL_WATCH_H_
