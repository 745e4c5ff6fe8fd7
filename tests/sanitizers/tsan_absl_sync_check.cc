// Checks tsan_absl_sync.cc before scripts/sanitize tsan trusts it: built
// with -fsanitize=thread and run with the library preloaded,
//   tsan_absl_sync_check ordered   must exit 0 with no report: every access
//       is ordered by an absl::Mutex, CondVar, Notification or
//       BlockingCounter;
//   tsan_absl_sync_check racy      must be reported: two writes ordered by
//       nothing (the mutex each thread takes afterwards must not order them);
//   tsan_absl_sync_check inverted  must be reported: two mutexes taken in
//       both orders (a potential deadlock).
// So the stage fails if the library hides races or does not load.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace {

int Ordered() {
  absl::Mutex mu;
  absl::CondVar cv;
  int guarded = 0;      // under mu
  bool turn_b = false;  // under mu, for the CondVar hand-off
  int handed = 0;       // written before Notify, read after the wait
  int counted[4] = {};  // each written by one thread before DecrementCount
  absl::Notification ready;
  absl::BlockingCounter done(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        absl::MutexLock lock(&mu);
        ++guarded;
      }
      {
        absl::ReaderMutexLock lock(&mu);
        volatile int seen = guarded;
        (void)seen;
      }
      counted[t] = t;
      done.DecrementCount();
    });
  }
  threads.emplace_back([&] {
    handed = 42;
    ready.Notify();
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&turn_b));
    ++guarded;
  });
  threads.emplace_back([&] {
    ready.WaitForNotification();
    const int seen = handed;
    absl::MutexLock lock(&mu);
    turn_b = seen == 42;
    cv.SignalAll();
  });
  done.Wait();
  int sum = 0;
  for (int c : counted) sum += c;
  {
    absl::MutexLock lock(&mu);
    while (!turn_b) cv.Wait(&mu);
  }
  for (auto& thread : threads) thread.join();
  absl::MutexLock lock(&mu);
  return guarded == 401 && sum == 6 ? 0 : 1;
}

int Racy() {
  absl::Mutex mu;
  int unordered = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      ++unordered;  // the race
      absl::MutexLock lock(&mu);
    });
  }
  for (auto& thread : threads) thread.join();
  return 0;
}

int Inverted() {
  absl::Mutex a;
  absl::Mutex b;
  {
    absl::MutexLock la(&a);
    absl::MutexLock lb(&b);
  }
  {
    absl::MutexLock lb(&b);
    absl::MutexLock la(&a);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "ordered") return Ordered();
  if (mode == "racy") return Racy();
  if (mode == "inverted") return Inverted();
  std::fprintf(stderr, "usage: tsan_absl_sync_check ordered|racy|inverted\n");
  return 64;
}
