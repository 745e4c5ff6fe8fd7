// One libuv loop and its thread, shared by the libraft instances of several
// Raft groups on one node (raft_consensus.h's RaftOptions::loop).
//
// A node hosting many idle groups spends its CPU on waking threads, not on
// work: with a loop per group, every group's timers and heartbeats woke a
// thread of its own. Groups on one loop are woken together: one timer ticks
// them all (the status refresh, and libraft's tick on the same boundaries,
// so that their heartbeats leave in one burst), and a burst of messages that
// arrives together is handled in one wakeup.
//
// libraft is not thread-safe: every call into a group's libraft instance,
// and every libuv call on the loop's handles, runs on the loop's thread.
// Post (a queue plus uv_async_send, the one thread-safe libuv call) hands
// work in from other threads.
//
// Thread safety: Post, RunAndWait, OnLoopThread and the destructor are
// thread-safe (RunAndWait and the destructor not from the loop thread);
// Add, Remove and the Ticked callbacks are loop thread only.
#ifndef DEDUP_REPLICATION_RAFT_CONSENSUS_SHARED_LOOP_H_
#define DEDUP_REPLICATION_RAFT_CONSENSUS_SHARED_LOOP_H_

#include <uv.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace dedup {

class RaftLoop {
 public:
  // Called on the loop thread every tick_ms(); `tick` counts the loop's
  // ticks since it started (the same value for every member in one round).
  class Ticked {
   public:
    virtual ~Ticked() = default;
    virtual void OnTick(uint64_t tick) = 0;
  };

  // Starts the loop's thread, ticking every `tick_ms` (> 0).
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<RaftLoop>> Start(
      unsigned tick_ms = 10);
  // Ends the loop and joins its thread. Every member must have left (Remove)
  // and closed its handles first: the loop closes only its own.
  ~RaftLoop();
  RaftLoop(const RaftLoop&) = delete;
  RaftLoop& operator=(const RaftLoop&) = delete;

  // Loop thread only (or before the loop runs, which Start hides).
  uv_loop_t* loop() { return &loop_; }
  unsigned tick_ms() const { return tick_ms_; }
  bool OnLoopThread() const {
    return std::this_thread::get_id() == thread_.get_id();
  }

  // Any thread: runs `fn` on the loop thread soon, after everything posted
  // before it. False (`fn` dropped, never run) once the loop is ending.
  bool Post(absl::AnyInvocable<void() &&> fn) ABSL_LOCKS_EXCLUDED(mu_);
  // Any thread but the loop's: runs `fn` on the loop thread and returns once
  // it has run (false, without running it, once the loop is ending).
  bool RunAndWait(absl::AnyInvocable<void() &&> fn) ABSL_LOCKS_EXCLUDED(mu_);

  // Loop thread only. `member` (not owned) is ticked until Removed. Neither
  // may be called from OnTick.
  void Add(Ticked* member);
  void Remove(Ticked* member);
  size_t members() const { return members_.size(); }
  // Loop thread only: handles on the loop, closing ones included (a group
  // that stopped, or failed to start, must leave none of its own).
  size_t handles();

 private:
  explicit RaftLoop(unsigned tick_ms) : tick_ms_(tick_ms) {}

  static void OnAsync(uv_async_t* handle);
  static void OnTimer(uv_timer_t* handle);

  const unsigned tick_ms_;
  uv_loop_t loop_{};
  uv_async_t async_{};
  uv_timer_t timer_{};
  std::thread thread_;

  absl::Mutex mu_;
  std::vector<absl::AnyInvocable<void() &&>> posted_ ABSL_GUARDED_BY(mu_);
  bool ending_ ABSL_GUARDED_BY(mu_) = false;

  // Loop thread.
  std::vector<Ticked*> members_;
  uint64_t ticks_ = 0;
};

// How many loops a node hosting `groups` groups runs: one per group up to
// the cores this process may use (groups on different loops apply entries
// in parallel), at most `max_loops` (beyond that, more loops only wake
// more often).
unsigned RaftLoopCount(size_t groups, unsigned max_loops = 4);

}  // namespace dedup

#endif  // DEDUP_REPLICATION_RAFT_CONSENSUS_SHARED_LOOP_H_
