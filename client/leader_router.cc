#include "client/leader_router.h"

#include <algorithm>
#include <utility>

#include "common/reconnect_backoff.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace dedup {
namespace {

std::shared_ptr<const Endpoint> MakeEndpoint(
    std::string address, std::shared_ptr<grpc::Channel> channel) {
  auto endpoint = std::make_shared<Endpoint>();
  endpoint->address = std::move(address);
  endpoint->stub = v1::Dedup::NewStub(channel);
  endpoint->channel = std::move(channel);
  return endpoint;
}

ChannelFactory OrInsecure(ChannelFactory factory) {
  if (factory) return factory;
  return [](const std::string& address) {
    grpc::ChannelArguments args;
    SetReconnectBackoff(args);
    return grpc::CreateCustomChannel(address,
                                     grpc::InsecureChannelCredentials(), args);
  };
}

}  // namespace

EndpointPool::EndpointPool(ChannelFactory factory)
    : factory_(OrInsecure(std::move(factory))) {}

std::shared_ptr<const Endpoint> EndpointPool::Get(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto& slot = endpoints_[address];
  if (slot == nullptr) {
    slot = MakeEndpoint(address, factory_(address));
    watch_.Watch(slot->channel);
  }
  return slot;
}

LeaderRouter::LeaderRouter(std::vector<std::string> addresses,
                           ChannelFactory factory)
    : LeaderRouter(std::make_shared<EndpointPool>(std::move(factory)),
                   std::move(addresses)) {}

LeaderRouter::LeaderRouter(std::shared_ptr<EndpointPool> pool,
                           std::vector<std::string> addresses)
    : addresses_(std::move(addresses)), pool_(std::move(pool)) {
  absl::MutexLock lock(&mu_);
  if (!addresses_.empty()) current_ = pool_->Get(addresses_.front());
}

LeaderRouter::LeaderRouter(std::shared_ptr<grpc::Channel> channel,
                           ChannelFactory factory)
    : LeaderRouter(std::make_shared<EndpointPool>(std::move(factory)),
                   std::move(channel)) {}

LeaderRouter::LeaderRouter(std::shared_ptr<EndpointPool> pool,
                           std::shared_ptr<grpc::Channel> channel)
    : pool_(std::move(pool)), initial_(MakeEndpoint("", std::move(channel))) {
  absl::MutexLock lock(&mu_);
  current_ = initial_;
}

std::shared_ptr<const Endpoint> LeaderRouter::Current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

void LeaderRouter::FollowLeader(const Endpoint& from,
                                const std::string& leader) {
  absl::MutexLock lock(&mu_);
  // Another call may have found the leader (or a newer one) meanwhile.
  if (current_.get() != &from) return;
  current_ = pool_->Get(leader);
}

void LeaderRouter::Advance(const Endpoint& failed) {
  absl::MutexLock lock(&mu_);
  if (current_.get() != &failed) return;
  const auto it =
      failed.address.empty()
          ? addresses_.end()
          : std::find(addresses_.begin(), addresses_.end(), failed.address);
  if (it != addresses_.end()) {
    const size_t next = (it - addresses_.begin() + 1) % addresses_.size();
    current_ = pool_->Get(addresses_[next]);
  } else if (initial_ != nullptr) {
    current_ = initial_;
  } else if (!addresses_.empty()) {
    current_ = pool_->Get(addresses_.front());
  }
}

std::shared_ptr<const Endpoint> LeaderRouter::EndpointFor(
    const std::string& address) {
  return pool_->Get(address);
}

std::string TrailerValue(const grpc::ClientContext& context,
                         absl::string_view name) {
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto it = trailers.find(grpc::string_ref(name.data(), name.size()));
  if (it == trailers.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

std::string LeaderHint(const grpc::ClientContext& context) {
  return TrailerValue(context, "dedup-leader");
}

bool IsUnknownOutcomeReply(const grpc::Status& status,
                           const grpc::ClientContext& context) {
  return status.error_code() == grpc::StatusCode::ABORTED &&
         TrailerValue(context, "dedup-outcome") == "unknown";
}

}  // namespace dedup
