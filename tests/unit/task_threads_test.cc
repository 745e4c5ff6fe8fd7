// TaskThreads: JoinAll waits for every task, and finished threads are
// joined as new tasks start.
#include "server/task_threads.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace dedup {
namespace {

TEST(TaskThreadsTest, JoinAllWaitsForRunningTasks) {
  TaskThreads tasks;
  std::atomic<int> done{0};
  absl::Notification release;
  for (int i = 0; i < 4; ++i) {
    tasks.Start([&] {
      release.WaitForNotification();
      done.fetch_add(1);
    });
  }
  EXPECT_EQ(done.load(), 0);
  release.Notify();
  tasks.JoinAll();
  EXPECT_EQ(done.load(), 4);
}

TEST(TaskThreadsTest, ManySequentialTasksAllRun) {
  std::atomic<int> done{0};
  {
    TaskThreads tasks;
    for (int i = 0; i < 500; ++i) tasks.Start([&] { done.fetch_add(1); });
  }  // the destructor joins
  EXPECT_EQ(done.load(), 500);
}

}  // namespace
}  // namespace dedup
