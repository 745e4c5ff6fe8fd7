#include "bench/load/timers.h"

#include <utility>

namespace dedup::bench {

void TimerHeap::Add(Clock::time_point when, std::function<void()> fn) {
  heap_.push(Entry{when, seq_++, std::move(fn)});
}

void TimerHeap::TakeDue(Clock::time_point now,
                        std::vector<std::function<void()>>* out) {
  while (!heap_.empty() && heap_.top().when <= now) {
    // priority_queue::top is const; the function is moved out before pop.
    out->push_back(std::move(const_cast<Entry&>(heap_.top()).fn));
    heap_.pop();
  }
}

TimerThread::TimerThread() : thread_([this] { Loop(); }) {}

TimerThread::~TimerThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void TimerThread::Add(Clock::time_point when, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    heap_.Add(when, std::move(fn));
  }
  cv_.notify_one();
}

void TimerThread::Loop() {
  std::vector<std::function<void()>> due;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (heap_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const Clock::time_point next = heap_.next();
    if (Clock::now() < next) {
      cv_.wait_until(lock, next);
      continue;
    }
    heap_.TakeDue(Clock::now(), &due);
    lock.unlock();
    for (auto& fn : due) fn();  // outside the lock: fn may Add
    due.clear();
    lock.lock();
  }
}

}  // namespace dedup::bench
