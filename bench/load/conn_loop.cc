#include "bench/load/conn_loop.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

namespace dedup::bench {

ConnLoop::~ConnLoop() {
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

std::string ConnLoop::Start() {
  if (pipe2(wake_, O_NONBLOCK | O_CLOEXEC) != 0) return "pipe2 failed";
  std::string error = Connect();
  if (!error.empty()) return error;
  thread_ = std::thread([this] { Loop(); });
  return "";
}

void ConnLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  (void)!write(wake_[1], "s", 1);
  if (thread_.joinable()) thread_.join();
}

void ConnLoop::Post(Clock::time_point when, std::function<void()> fn) {
  if (std::this_thread::get_id() == loop_id_.load()) {
    timers_.Add(when, std::move(fn));  // no lock, no wake-up needed
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.emplace_back(when, std::move(fn));
  }
  (void)!write(wake_[1], "p", 1);
}

void ConnLoop::Loop() {
  loop_id_ = std::this_thread::get_id();
  std::vector<std::pair<Clock::time_point, std::function<void()>>> posted;
  std::vector<std::function<void()>> due;
  Clock::time_point stop_deadline = Clock::time_point::max();
  std::string error;
  while (true) {
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mu_);
      posted.swap(incoming_);
      stopping = stop_;
    }
    for (auto& [when, fn] : posted) timers_.Add(when, std::move(fn));
    posted.clear();
    if (stopping && stop_deadline == Clock::time_point::max()) {
      stop_deadline = Clock::now() + std::chrono::seconds(5);
    }
    timers_.TakeDue(Clock::now(), &due);
    for (auto& fn : due) fn();
    due.clear();
    if (stopping && (Idle() || Clock::now() >= stop_deadline)) break;
    // A broken connection answers every call with its error, so the slots
    // count errors instead of hanging.
    if (!error.empty()) FailAll(error);
    if (error.empty() && WantWrite()) error = Flush();

    int timeout_ms = -1;
    if (!timers_.empty()) {
      const auto wait = timers_.next() - Clock::now();
      timeout_ms = static_cast<int>(std::max<int64_t>(
          0, std::chrono::ceil<std::chrono::milliseconds>(wait).count()));
    }
    if (stopping) timeout_ms = timeout_ms < 0 ? 100 : std::min(timeout_ms, 100);
    pollfd fds[2] = {
        {wake_[0], POLLIN, 0},
        {fd(), static_cast<short>(POLLIN | (WantWrite() ? POLLOUT : 0)), 0}};
    if (poll(fds, error.empty() ? 2 : 1, timeout_ms) < 0) continue;  // EINTR
    if (fds[0].revents & POLLIN) {
      char buf[256];
      while (read(wake_[0], buf, sizeof(buf)) > 0) {
      }
    }
    if (error.empty() && (fds[1].revents & (POLLIN | POLLERR | POLLHUP))) {
      error = OnReadable();
    }
  }
}

}  // namespace dedup::bench
