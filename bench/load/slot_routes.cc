#include "bench/load/slot_routes.h"

#include <chrono>
#include <utility>

#include "absl/time/time.h"
#include "dedup/v1/cluster.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace dedup::bench {
namespace {

constexpr absl::Duration kFetchDeadline = absl::Seconds(2);
// AwaitFirstFetch waits at most 1 s a time; a capped node may be slower.
constexpr int kFetchWaits = 10;

}  // namespace

bool ParseRouteMode(absl::string_view text, RouteMode* mode) {
  if (text == "auto") {
    *mode = RouteMode::kAuto;
  } else if (text == "fixed") {
    *mode = RouteMode::kFixed;
  } else if (text == "shard") {
    *mode = RouteMode::kShard;
  } else {
    return false;
  }
  return true;
}

ChannelFactory ConnectionChannelFactory(int conn) {
  return [conn](const std::string& address) {
    grpc::ChannelArguments args;
    args.SetInt(kChannelArg, conn);
    return grpc::CreateCustomChannel(address,
                                     grpc::InsecureChannelCredentials(), args);
  };
}

absl::StatusOr<int> ShardGroupCount(
    const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = v1::Cluster::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoNanoseconds(kFetchDeadline));
  v1::ShardMapResponse map;
  const grpc::Status status =
      stub->ShardMap(&context, v1::ShardMapRequest(), &map);
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) return 1;
  if (!status.ok()) {
    return absl::UnavailableError("Cluster.ShardMap: " +
                                  status.error_message());
  }
  return map.groups_size();
}

void CallTarget::Observe(const grpc::ClientContext& context,
                         const grpc::Status& status) const {
  if (shards != nullptr && endpoint != nullptr) {
    shards->Observe(route, *endpoint, context, status);
  }
}

SlotRoutes::SlotRoutes(std::string address, int connections)
    : address_(std::move(address)) {
  for (int i = 0; i < connections; ++i) {
    auto pool = std::make_shared<EndpointPool>(ConnectionChannelFactory(i));
    auto seed = std::make_shared<LeaderRouter>(
        std::move(pool), std::vector<std::string>{address_});
    shards_.push_back(
        std::make_unique<ShardRouter>(std::move(seed), kFetchDeadline));
  }
}

SlotRoutes::~SlotRoutes() = default;

std::string SlotRoutes::Start() {
  for (size_t i = 0; i < shards_.size(); ++i) {
    ShardRouter& shards = *shards_[i];
    for (int wait = 0; wait < kFetchWaits && shards.epoch() == 0; ++wait) {
      shards.AwaitFirstFetch(absl::Seconds(1));
    }
    if (shards.epoch() == 0) {  // no map held
      return "no shard map from " + address_ + " (connection " +
             std::to_string(i) + ")";
    }
  }
  return "";
}

CallTarget SlotRoutes::TargetOf(ShardRouter& shards, ShardRouter::Route route) {
  CallTarget t;
  t.shards = &shards;
  t.endpoint = route.router->Current();
  t.stub = t.endpoint->stub.get();
  t.route = std::move(route);
  return t;
}

CallTarget SlotRoutes::OfKey(int conn, absl::string_view ns,
                             absl::string_view key) const {
  ShardRouter& shards = *shards_[conn];
  return TargetOf(shards, shards.RouteOf(ns, key));
}

CallTarget SlotRoutes::OfGroup(int conn, uint32_t group) const {
  ShardRouter& shards = *shards_[conn];
  return TargetOf(shards, shards.RouteOfGroup(group));
}

uint32_t SlotRoutes::GroupOf(int conn, absl::string_view ns,
                             absl::string_view key) const {
  return shards_[conn]->RouteOf(ns, key).group;
}

}  // namespace dedup::bench
