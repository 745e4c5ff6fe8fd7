// Threads that serve one call each off gRPC's callback threads (a full
// compaction, a state digest, a checkpoint stream), owned instead of
// detached, so the daemon knows when the last of them has returned.
#ifndef DEDUP_SERVER_TASK_THREADS_H_
#define DEDUP_SERVER_TASK_THREADS_H_

#include <list>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace dedup {

// Thread-safe. A task that finishes a gRPC call must do so as its last
// use of anything the call owns; its thread is joined later (by the next
// Start, by JoinAll or by the destructor).
class TaskThreads {
 public:
  TaskThreads() = default;
  TaskThreads(const TaskThreads&) = delete;
  TaskThreads& operator=(const TaskThreads&) = delete;
  // Joins every thread (waits for the tasks still running).
  ~TaskThreads() { JoinAll(); }

  // Runs `task` on a new thread. Joins the threads of tasks already done.
  void Start(absl::AnyInvocable<void() &&> task);

  // Waits for every task started so far. Call it once the gRPC server has
  // shut down (no call can start a task any more).
  void JoinAll();

 private:
  struct Entry {
    std::thread thread;
    bool done = false;
  };

  absl::Mutex mu_;
  std::list<Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup

#endif  // DEDUP_SERVER_TASK_THREADS_H_
