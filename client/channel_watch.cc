#include "client/channel_watch.h"

#include <utility>

#include "absl/time/clock.h"

namespace dedup {

// The tag of a channel's pending watch; owned by that watch.
struct ChannelWatch::Watched {
  // Weak: destroying the channel must end its watch, not wait for it.
  std::weak_ptr<grpc::Channel> channel;
};

ChannelWatch::~ChannelWatch() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    // Under the lock: no watch is armed after the queue is shut down.
    queue_.Shutdown();
  }
  if (thread_.joinable()) thread_.join();
}

void ChannelWatch::Watch(const std::shared_ptr<grpc::Channel>& channel) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  if (!started_) {
    started_ = true;
    thread_ = std::thread([this] { Run(); });
  }
  auto watched = std::make_unique<Watched>();
  watched->channel = channel;
  if (ArmLocked(watched.get())) watched.release();
}

bool ChannelWatch::ArmLocked(Watched* watched) {
  const std::shared_ptr<grpc::Channel> channel = watched->channel.lock();
  if (channel == nullptr) return false;
  const grpc_connectivity_state state =
      channel->GetState(/*try_to_connect=*/true);
  if (state == GRPC_CHANNEL_SHUTDOWN) return false;
  channel->NotifyOnStateChange(
      state, absl::ToChronoTime(absl::Now() + kWatchPeriod), &queue_, watched);
  return true;
}

void ChannelWatch::Run() {
  void* tag = nullptr;
  bool ok = false;
  // Each event is a state change or the end of a period; the queue drains
  // after Shutdown once every pending watch has ended.
  while (queue_.Next(&tag, &ok)) {
    std::unique_ptr<Watched> watched(static_cast<Watched*>(tag));
    absl::MutexLock lock(&mu_);
    if (!stopping_ && ArmLocked(watched.get())) watched.release();
  }
}

}  // namespace dedup
