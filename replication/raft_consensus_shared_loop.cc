#include "replication/raft_consensus_shared_loop.h"

#include <sched.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/thread_name.h"

namespace dedup {

absl::StatusOr<std::shared_ptr<RaftLoop>> RaftLoop::Start(unsigned tick_ms) {
  if (tick_ms == 0) return absl::InvalidArgumentError("tick_ms: must be > 0");
  std::shared_ptr<RaftLoop> self(new RaftLoop(tick_ms));
  if (int rv = uv_loop_init(&self->loop_); rv != 0) {
    return absl::InternalError(absl::StrCat("uv_loop_init: ", uv_strerror(rv)));
  }
  uv_async_init(&self->loop_, &self->async_, &RaftLoop::OnAsync);
  self->async_.data = self.get();
  uv_timer_init(&self->loop_, &self->timer_);
  self->timer_.data = self.get();
  uv_timer_start(&self->timer_, &RaftLoop::OnTimer, tick_ms, tick_ms);
  self->thread_ = std::thread([loop = &self->loop_] {
    NameThisThread("dedup-raft-loop");
    uv_run(loop, UV_RUN_DEFAULT);
  });
  return self;
}

RaftLoop::~RaftLoop() {
  {
    absl::MutexLock lock(&mu_);
    ending_ = true;
  }
  uv_async_send(&async_);
  thread_.join();
  uv_loop_close(&loop_);
}

bool RaftLoop::Post(absl::AnyInvocable<void() &&> fn) {
  {
    absl::MutexLock lock(&mu_);
    if (ending_) return false;
    posted_.push_back(std::move(fn));
  }
  uv_async_send(&async_);
  return true;
}

bool RaftLoop::RunAndWait(absl::AnyInvocable<void() &&> fn) {
  absl::Notification ran;
  if (!Post([&ran, fn = std::move(fn)]() mutable {
        std::move(fn)();
        ran.Notify();
      })) {
    return false;
  }
  ran.WaitForNotification();
  return true;
}

void RaftLoop::Add(Ticked* member) { members_.push_back(member); }

void RaftLoop::Remove(Ticked* member) {
  members_.erase(std::remove(members_.begin(), members_.end(), member),
                 members_.end());
}

size_t RaftLoop::handles() {
  size_t count = 0;
  uv_walk(
      &loop_, [](uv_handle_t*, void* arg) { ++*static_cast<size_t*>(arg); },
      &count);
  return count;
}

void RaftLoop::OnAsync(uv_async_t* handle) {
  auto* self = static_cast<RaftLoop*>(handle->data);
  std::vector<absl::AnyInvocable<void() &&>> posted;
  bool ending;
  {
    absl::MutexLock lock(&self->mu_);
    posted.swap(self->posted_);
    ending = self->ending_;
  }
  for (auto& fn : posted) std::move(fn)();
  if (!ending) return;
  uv_close(reinterpret_cast<uv_handle_t*>(&self->async_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&self->timer_), nullptr);
  // Handles a member failed to close would keep the loop running forever.
  uv_stop(&self->loop_);
}

void RaftLoop::OnTimer(uv_timer_t* handle) {
  auto* self = static_cast<RaftLoop*>(handle->data);
  const uint64_t tick = ++self->ticks_;
  for (Ticked* member : self->members_) member->OnTick(tick);
}

unsigned RaftLoopCount(size_t groups, unsigned max_loops) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  unsigned cores = 1;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) {
    cores = std::max(1, CPU_COUNT(&cpus));
  }
  const size_t loops =
      std::min<size_t>({groups, cores, std::max(1u, max_loops)});
  return static_cast<unsigned>(std::max<size_t>(loops, 1));
}

}  // namespace dedup
