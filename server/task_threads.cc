#include "server/task_threads.h"

#include <utility>

namespace dedup {

void TaskThreads::Start(absl::AnyInvocable<void() &&> task) {
  std::vector<std::thread> finished;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->done) {
        finished.push_back(std::move(it->thread));
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
    entries_.emplace_back();
    // A list node stays put until erased (above, once done) or moved whole
    // to JoinAll's list, so the thread may mark it done through a pointer.
    Entry* entry = &entries_.back();
    entry->thread =
        std::thread([this, entry, task = std::move(task)]() mutable {
          std::move(task)();
          absl::MutexLock done_lock(&mu_);
          entry->done = true;
        });
  }
  // Threads marked done have at most their return left.
  for (std::thread& t : finished) t.join();
}

void TaskThreads::JoinAll() {
  std::list<Entry> entries;
  {
    absl::MutexLock lock(&mu_);
    entries.swap(entries_);
  }
  for (Entry& e : entries) {
    if (e.thread.joinable()) e.thread.join();
  }
}

}  // namespace dedup
