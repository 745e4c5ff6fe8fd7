// Which dedupd node a client sends its next call to, for a single server or
// a replicated group where only the leader answers.
//
// The router holds the configured addresses and an EndpointPool (one channel
// per address ever used, including leader addresses learnt from
// "dedup-leader" trailers that were not configured), its own or one shared
// with other routers. Calls go to the current endpoint; a
// caller moves it with FollowLeader (a follower named the leader) or Advance
// (the endpoint failed or knows no leader). The current endpoint is shared by
// every call, so a leader found once is remembered for later calls.
//
// Thread-safe. Endpoints are never destroyed while the router lives, and a
// call keeps the shared_ptr it was given, so one may be in use while another
// thread moves the router on.
#ifndef DEDUP_CLIENT_LEADER_ROUTER_H_
#define DEDUP_CLIENT_LEADER_ROUTER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client/channel_watch.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace dedup {

// Opens a channel to "host:port". Empty: an insecure channel.
using ChannelFactory =
    std::function<std::shared_ptr<grpc::Channel>(const std::string& address)>;

// One node as the client reaches it.
struct Endpoint {
  // "" for a channel the caller supplied without an address.
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Dedup::Stub> stub;
};

// The endpoints of a client, one per address ever used, shared by the
// routers of one client (a cluster's groups share their nodes). The channels
// it opens connect at once and keep reconnecting while their server is away
// (ChannelWatch, one thread per pool). Thread-safe; endpoints live as long as
// the pool.
class EndpointPool {
 public:
  explicit EndpointPool(ChannelFactory factory);

  EndpointPool(const EndpointPool&) = delete;
  EndpointPool& operator=(const EndpointPool&) = delete;

  // The cached endpoint for `address`, opened if needed.
  [[nodiscard]] std::shared_ptr<const Endpoint> Get(const std::string& address);

 private:
  const ChannelFactory factory_;
  // Declared before endpoints_: destroyed after the channels, which ends
  // their watches at once.
  ChannelWatch watch_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const Endpoint>> endpoints_
      ABSL_GUARDED_BY(mu_);
};

class LeaderRouter {
 public:
  // `addresses` in the order they are tried; an empty list yields no
  // endpoint (Current() returns nullptr).
  LeaderRouter(std::vector<std::string> addresses, ChannelFactory factory);
  // As above, with the endpoints of `pool` (shared with other routers).
  LeaderRouter(std::shared_ptr<EndpointPool> pool,
               std::vector<std::string> addresses);
  // One endpoint over an existing channel (any credentials); leader
  // addresses learnt later are opened with `factory`.
  LeaderRouter(std::shared_ptr<grpc::Channel> channel, ChannelFactory factory);
  // As above, with the endpoints of `pool`.
  LeaderRouter(std::shared_ptr<EndpointPool> pool,
               std::shared_ptr<grpc::Channel> channel);

  LeaderRouter(const LeaderRouter&) = delete;
  LeaderRouter& operator=(const LeaderRouter&) = delete;

  // Where the next call goes; nullptr only when no address was configured.
  [[nodiscard]] std::shared_ptr<const Endpoint> Current() const;

  // A follower named `leader`: make it current (opening a channel to it if
  // none is cached), unless another call already moved the router away from
  // `from`, the endpoint that answered.
  void FollowLeader(const Endpoint& from, const std::string& leader);

  // `failed` could not answer (connection failure, or no leader known): make
  // the configured address after it current, unless the router has already
  // moved on. After a learnt address, the first configured one is next.
  void Advance(const Endpoint& failed);

  // The cached endpoint for `address`, opened if needed: for calls that must
  // reach one particular node.
  [[nodiscard]] std::shared_ptr<const Endpoint> EndpointFor(
      const std::string& address);

  const std::vector<std::string>& addresses() const { return addresses_; }

  // The caller's channel of the channel constructor; else nullptr.
  const std::shared_ptr<const Endpoint>& initial() const { return initial_; }

  const std::shared_ptr<EndpointPool>& pool() const { return pool_; }

 private:
  const std::vector<std::string> addresses_;
  const std::shared_ptr<EndpointPool> pool_;
  // The caller's channel, for the channel constructor; else nullptr.
  const std::shared_ptr<const Endpoint> initial_;

  mutable absl::Mutex mu_;
  std::shared_ptr<const Endpoint> current_ ABSL_GUARDED_BY(mu_);
};

// The trailer `name` of a finished call, or "" when the server sent none.
[[nodiscard]] std::string TrailerValue(const grpc::ClientContext& context,
                                       absl::string_view name);

// The "dedup-leader" trailer of a finished call (a follower's UNAVAILABLE),
// or "" when the server sent none.
[[nodiscard]] std::string LeaderHint(const grpc::ClientContext& context);

// True for ABORTED with the trailer "dedup-outcome: unknown": the server
// proposed the operation but lost leadership before knowing whether it took
// effect.
[[nodiscard]] bool IsUnknownOutcomeReply(const grpc::Status& status,
                                         const grpc::ClientContext& context);

}  // namespace dedup

#endif  // DEDUP_CLIENT_LEADER_ROUTER_H_
