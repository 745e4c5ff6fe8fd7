#include "client/shard_router.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/slot.h"
#include "dedup/v1/cluster.grpc.pb.h"

namespace dedup {
namespace {

// Refreshes closer together than this are dropped: every answer of a
// moved cluster carries the new epoch until the map is fetched.
constexpr absl::Duration kMinRefreshInterval = absl::Seconds(1);
constexpr absl::Duration kMaxFetchDeadline = absl::Seconds(2);
constexpr absl::Duration kMaxFirstFetchWait = absl::Seconds(1);

}  // namespace

size_t ShardTable::IndexOf(uint32_t slot) const {
  const auto it = std::upper_bound(
      groups.begin(), groups.end(), slot,
      [](uint32_t s, const v1::ShardGroup& g) { return s < g.end_slot(); });
  return std::min<size_t>(it - groups.begin(), groups.size() - 1);
}

absl::StatusOr<ShardTable> ToShardTable(const v1::ShardMapResponse& map) {
  if (map.slot_count() != kSlotCount) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard map: slot_count ", map.slot_count(), ", not ", kSlotCount));
  }
  ShardTable table;
  table.epoch = map.epoch();
  uint32_t next = 0;
  for (const v1::ShardGroup& group : map.groups()) {
    if (group.first_slot() != next || group.end_slot() <= group.first_slot() ||
        group.end_slot() > kSlotCount) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard map: group ", group.group_id(), " owns [", group.first_slot(),
          ", ", group.end_slot(), "), expected a range from ", next));
    }
    next = group.end_slot();
    table.groups.push_back(group);
  }
  if (next != kSlotCount) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard map: slots [", next, ", ", kSlotCount, ") have no group"));
  }
  return table;
}

std::vector<std::string> GroupAddresses(const v1::ShardGroup& group) {
  std::vector<std::string> out;
  auto add = [&out](const std::string& address) {
    if (!address.empty() &&
        std::find(out.begin(), out.end(), address) == out.end()) {
      out.push_back(address);
    }
  };
  add(group.leader_address());
  for (const v1::ShardReplica& replica : group.replicas()) {
    add(replica.client_address());
  }
  return out;
}

struct ShardRouter::Map {
  ShardTable table;
  std::vector<Route> routes;  // per group of the table
  absl::flat_hash_map<uint32_t, size_t> index_of_group;
  absl::flat_hash_set<std::string> addresses;  // every group's
};

// One fetch: the nodes asked in turn until one answers. Each call keeps its
// own context and stub until the fetch ends.
struct ShardRouter::Fetch {
  std::vector<std::shared_ptr<const Endpoint>> candidates;
  size_t next = 0;
  std::vector<std::unique_ptr<v1::Cluster::Stub>> stubs;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  v1::ShardMapRequest request;
  v1::ShardMapResponse response;
};

ShardRouter::ShardRouter(std::shared_ptr<LeaderRouter> seed,
                         absl::Duration fetch_deadline)
    : seed_(std::move(seed)),
      fetch_deadline_(std::min(fetch_deadline, kMaxFetchDeadline)) {}

ShardRouter::~ShardRouter() {
  std::unique_lock<std::mutex> lock(fetch_mu_);
  closing_ = true;
  if (fetching_ != nullptr && !fetching_->contexts.empty()) {
    fetching_->contexts.back()->TryCancel();
  }
  fetch_cv_.wait(lock, [this] { return fetching_ == nullptr; });
}

void ShardRouter::Start() {
  {
    std::lock_guard<std::mutex> lock(fetch_mu_);
    if (started_) return;
    started_ = true;
  }
  Refresh(nullptr, /*first_fetch=*/true);
}

void ShardRouter::AwaitFirstFetch(absl::Duration timeout) {
  Start();
  std::unique_lock<std::mutex> lock(fetch_mu_);
  timeout = std::min(timeout, kMaxFirstFetchWait);
  fetch_cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                     [this] { return first_done_ || closing_; });
}

std::shared_ptr<const ShardRouter::Map> ShardRouter::CurrentMap() const {
  absl::MutexLock lock(&mu_);
  return map_;
}

uint64_t ShardRouter::epoch() const {
  const std::shared_ptr<const Map> map = CurrentMap();
  return map == nullptr ? 0 : map->table.epoch;
}

ShardRouter::Route ShardRouter::RouteOf(absl::string_view ns,
                                        absl::string_view key) const {
  const std::shared_ptr<const Map> map = CurrentMap();
  if (map == nullptr) return Route{seed_, kNoGroup};
  return map->routes[map->table.IndexOf(SlotOf(ns, key))];
}

ShardRouter::Route ShardRouter::RouteOfGroup(uint32_t group) const {
  const std::shared_ptr<const Map> map = CurrentMap();
  if (map == nullptr) return Route{seed_, kNoGroup};
  const auto it = map->index_of_group.find(group);
  if (it == map->index_of_group.end()) return Route{seed_, kNoGroup};
  return map->routes[it->second];
}

void ShardRouter::Observe(const Route& route, const Endpoint& endpoint,
                          const grpc::ClientContext& context,
                          const grpc::Status& status) {
  const std::string epoch_text = TrailerValue(context, "dedup-shard-epoch");
  const std::string leader = LeaderHint(context);
  if (epoch_text.empty() && leader.empty()) return;
  const std::shared_ptr<const Map> map = CurrentMap();
  const uint64_t held = map == nullptr ? 0 : map->table.epoch;
  uint64_t epoch = 0;
  bool refresh = absl::SimpleAtoi(epoch_text, &epoch) && epoch > held;
  if (!leader.empty() && map != nullptr && !map->addresses.contains(leader)) {
    refresh = true;
  }
  // A forwarded call's answer names its group's leader: go there next. An
  // UNAVAILABLE's hint is the retry rule's (it counts the hops).
  if (!leader.empty() && route.group != kNoGroup &&
      status.error_code() != grpc::StatusCode::UNAVAILABLE &&
      leader != endpoint.address) {
    route.router->FollowLeader(endpoint, leader);
  }
  if (refresh) {
    Refresh(endpoint.address.empty() ? nullptr
                                     : seed_->pool()->Get(endpoint.address),
            /*first_fetch=*/false);
  }
}

void ShardRouter::ObserveRedirect(const Route& route, const Endpoint& endpoint,
                                  const std::string& leader) {
  const std::shared_ptr<const Map> map = CurrentMap();
  // Without a map the first fetch is under way, or the cluster has none.
  if (map == nullptr || leader.empty()) return;
  const std::vector<std::string>& replicas = route.router->addresses();
  const bool known =
      map->addresses.contains(leader) &&
      (route.group == kNoGroup ||
       std::find(replicas.begin(), replicas.end(), leader) != replicas.end());
  if (known) return;
  Refresh(
      endpoint.address.empty() ? nullptr : seed_->pool()->Get(endpoint.address),
      /*first_fetch=*/false);
}

void ShardRouter::Refresh(std::shared_ptr<const Endpoint> first,
                          bool first_fetch) {
  auto fetch = std::make_unique<Fetch>();
  {
    std::lock_guard<std::mutex> lock(fetch_mu_);
    const absl::Time now = absl::Now();
    if (closing_ || fetching_ != nullptr ||
        (!first_fetch && now - last_fetch_ < kMinRefreshInterval)) {
      return;
    }
    last_fetch_ = now;
    fetching_ = fetch.get();
  }
  auto add = [&](std::shared_ptr<const Endpoint> endpoint) {
    if (endpoint == nullptr) return;
    for (const auto& known : fetch->candidates) {
      if (known.get() == endpoint.get()) return;
    }
    fetch->candidates.push_back(std::move(endpoint));
  };
  add(std::move(first));
  for (const std::string& address : seed_->addresses()) {
    add(seed_->pool()->Get(address));
  }
  add(seed_->initial());
  FetchNext(fetch.release());
}

void ShardRouter::FetchNext(Fetch* fetch) {
  if (fetch->next >= fetch->candidates.size()) {
    EndFetch(fetch);
    return;
  }
  const std::shared_ptr<const Endpoint>& endpoint =
      fetch->candidates[fetch->next++];
  grpc::ClientContext* context;
  {
    std::lock_guard<std::mutex> lock(fetch_mu_);
    if (closing_)
      context = nullptr;
    else {
      fetch->contexts.push_back(std::make_unique<grpc::ClientContext>());
      context = fetch->contexts.back().get();
    }
  }
  if (context == nullptr) {
    EndFetch(fetch);
    return;
  }
  context->set_deadline(absl::ToChronoTime(absl::Now() + fetch_deadline_));
  fetch->stubs.push_back(v1::Cluster::NewStub(endpoint->channel));
  fetch->response.Clear();
  // Nothing touches `fetch` after the call starts: its callback owns it.
  fetch->stubs.back()->async()->ShardMap(
      context, &fetch->request, &fetch->response,
      [this, fetch](grpc::Status status) { OnFetched(fetch, status); });
}

void ShardRouter::OnFetched(Fetch* fetch, const grpc::Status& status) {
  if (status.ok()) {
    absl::StatusOr<ShardTable> table = ToShardTable(fetch->response);
    if (table.ok()) {
      Install(*std::move(table));
      EndFetch(fetch);
      return;
    }
  } else if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    // A single node (or a server without groups): nobody else will know.
    EndFetch(fetch);
    return;
  }
  FetchNext(fetch);
}

void ShardRouter::Install(ShardTable table) {
  auto map = std::make_shared<Map>();
  for (size_t i = 0; i < table.groups.size(); ++i) {
    const v1::ShardGroup& group = table.groups[i];
    std::vector<std::string> addresses = GroupAddresses(group);
    for (const std::string& address : addresses) map->addresses.insert(address);
    Route route{seed_, kNoGroup};
    if (!addresses.empty()) {
      route.router =
          std::make_shared<LeaderRouter>(seed_->pool(), std::move(addresses));
      route.group = group.group_id();
    }
    map->routes.push_back(std::move(route));
    map->index_of_group[group.group_id()] = i;
  }
  map->table = std::move(table);
  absl::MutexLock lock(&mu_);
  // An older map (a lagging node's) never replaces a newer one.
  if (map_ != nullptr && map_->table.epoch > map->table.epoch) return;
  map_ = std::move(map);
}

void ShardRouter::EndFetch(Fetch* fetch) {
  // The last thing done: the destructor may run as soon as this unlocks.
  std::lock_guard<std::mutex> lock(fetch_mu_);
  fetching_ = nullptr;
  first_done_ = true;
  delete fetch;
  fetch_cv_.notify_all();
}

}  // namespace dedup
