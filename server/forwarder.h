// One-hop forwarding of dedup.v1.Dedup calls to the leader of the key's
// group ("any node answers"): a call this node would refuse UNAVAILABLE
// with a leader hint (kLeaderAddressPayload) is sent on to that address and
// the leader's answer (response or status, its trailing metadata, plus
// "dedup-leader: <address>") is the caller's.
//
// - An UNAVAILABLE gets no "dedup-leader" of this node's making: clients
//   read UNAVAILABLE with a hint as "nothing happened", which a call broken
//   on its way back from the leader cannot promise (the leader's own hint,
//   when it sent one, is relayed).
// - Batch items refused one by one (a node hosting several groups) go on
//   as one sub-batch per leader; a sub-batch that failed as a whole answers
//   its items with its status when it certainly changed nothing, else
//   ABORTED (outcome unknown).
//
// - Never twice: the forwarded call carries "dedup-forwarded: <node id>",
//   and a call that carries it is answered here (UNAVAILABLE with the
//   hint), so a stale hint cannot make a loop.
// - Sent again once, when leadership moved meanwhile: a forwarded call (or
//   batch item) the node it went to refused UNAVAILABLE naming another
//   leader goes to that leader, once, within the caller's deadline (still
//   one hop from here; the call carries "dedup-forwarded" again). Only such
//   a refusal qualifies, because only it says nothing happened: the call
//   as a whole with a "dedup-leader" trailer (a server's refusal before
//   running it: its store's NotLeader or a group it does not host), or an
//   item whose ItemError is UNAVAILABLE naming "the leader is [likely] node
//   N at host:port" with no reason (the same refusals, said in the text).
//   Everything else is relayed as it came: a transport UNAVAILABLE (no
//   trailer; the call may have reached the leader), ABORTED (outcome
//   unknown), DEADLINE_EXCEEDED, and any answer of the second send.
// - The caller's deadline and cancellation go with the call (the forwarded
//   call is a child of the incoming one), and so does its "authorization"
//   metadata: the leader authorizes the caller itself. A caller that has no
//   "authorization" while tenants are on (authenticated by its client
//   certificate, which cannot travel) is not forwarded.
// - Asynchronous: nothing here blocks a gRPC callback thread; answers are
//   relayed from the client call's callback.
//
// Counted in dedup_forwarded_calls_total{result} (each send),
// dedup_forward_resent_total (calls and items sent again) and
// dedup_forward_duration_seconds.
#ifndef DEDUP_SERVER_FORWARDER_H_
#define DEDUP_SERVER_FORWARDER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/channel_security.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/server_context.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/rpc_call.h"

namespace dedup {

// Request metadata marking a forwarded call (value: the forwarder's id).
inline constexpr char kForwardedMetadata[] = "dedup-forwarded";

struct ForwarderOptions {
  // This node's id, sent as "dedup-forwarded".
  uint64_t node_id = 0;
  // This node's client address: a hint naming it is never followed.
  std::string self_address;
  // Opens channels to other nodes' client ports (TLS as the node's peer
  // calls, and no credential of its own: the caller's travels).
  ChannelFactory open;
  // Tenants on: only calls with "authorization" metadata are forwarded.
  bool auth_enabled = false;
  // Holds the metrics; not owned, must outlive the forwarder.
  prometheus::Registry* registry = nullptr;
  // The shard map epoch this node serves, sent as "dedup-shard-epoch" with
  // every forwarded answer (unless the leader sent its own) so that a smart
  // client holding an older map refreshes it. Thread-safe; null: not sent.
  std::function<uint64_t()> shard_epoch;
};

// The leader address a refusal's message names ("... leader is [likely]
// node N at host:port", the words of MemberDirectory::NotLeader and
// GroupDirectory::NotHosted), or "": how a batch item's ItemError, which
// has no field for it, names the leader.
[[nodiscard]] std::string LeaderAddressInMessage(absl::string_view message);

// A batch item refused with a leader hint, to send on to that leader.
struct DeferredItem {
  int index = 0;
  std::string address;
};

// Thread-safe. Must outlive every call it forwards (shut the gRPC server
// down first).
class Forwarder {
 public:
  explicit Forwarder(ForwarderOptions options);

  // Whether calls of `context` may be forwarded at all: not forwarded
  // already, and with a credential that can travel.
  [[nodiscard]] bool MayForward(
      const grpc::CallbackServerContext& context) const;
  // The address to forward a call refused with `error` to: the hint of an
  // UNAVAILABLE naming another node; "" when the refusal is the answer.
  [[nodiscard]] std::string TargetOf(const absl::Status& error) const;

  // Sends `request` to the leader at `address` and finishes `call` with its
  // answer (written into `response`). `request` and `response` are the
  // call's own: valid until it finishes. Defined for every unary and batch
  // request of dedup.v1.Dedup.
  template <typename Request, typename Response>
  void Forward(const RpcCall& call, const std::string& address,
               const Request* request, Response* response);

  // Sends the `items` of `request` as one sub-batch per address, puts each
  // answer in its place in `response` (an item whose sub-batch failed gets
  // an ItemError, see above) and finishes `call` OK once all are in.
  // Defined for the three batch requests.
  template <typename BatchRequest, typename BatchResponse>
  void ForwardItems(const RpcCall& call, std::vector<DeferredItem> items,
                    const BatchRequest* request, BatchResponse* response);

 private:
  // The client context of a call forwarded on behalf of `incoming`.
  std::shared_ptr<grpc::ClientContext> ClientContextFor(
      const grpc::CallbackServerContext& incoming) const;
  v1::Dedup::Stub* StubFor(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);
  // Forward's one send; `may_resend`: a refusal naming another leader sends
  // the call there (once).
  template <typename Request, typename Response>
  void SendOnce(const RpcCall& call, const std::string& address,
                const Request* request, Response* response, bool may_resend);
  // Sends the items `indices` of `request` to `address` as one sub-batch
  // and places their answers; the last of `remaining` finishes `call`.
  template <typename BatchRequest, typename BatchResponse>
  void SendItems(const RpcCall& call, const std::string& address,
                 std::vector<int> indices, const BatchRequest* request,
                 BatchResponse* response,
                 std::shared_ptr<std::atomic<int>> remaining, bool may_resend);
  // A whole batch forwarded to `address` and answered (placed in
  // `response`): sends its items refused naming another leader there
  // (once), then finishes `call` OK; false when none was.
  template <typename BatchRequest, typename BatchResponse>
  bool ResendRefusedItems(const RpcCall& call, const std::string& address,
                          const BatchRequest* request, BatchResponse* response);
  // The items `indices` answered by `address` (placed in `response`) that
  // may go once more to another leader, by that leader.
  template <typename BatchResponse>
  static std::map<std::string, std::vector<int>> ItemsToResend(
      const std::string& address, const std::vector<int>& indices,
      const BatchResponse& response);
  // Counts one forwarded call, answered `status` after `seconds`.
  void Record(const grpc::Status& status, double seconds) const;

  const ForwarderOptions options_;
  mutable absl::Mutex mu_;
  // One per leader address met; the cluster's members bound it.
  absl::flat_hash_map<std::string, std::unique_ptr<v1::Dedup::Stub>> stubs_
      ABSL_GUARDED_BY(mu_);
  prometheus::Family<prometheus::Counter>* results_ = nullptr;
  prometheus::Histogram* duration_ = nullptr;
  prometheus::Counter* resent_ = nullptr;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_FORWARDER_H_
