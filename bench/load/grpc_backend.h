// dedupd over gRPC with the callback API: calls are started from any thread
// and answered on gRPC's own threads, so N outstanding calls need no thread
// each. Each of the `channels` channels gets a distinct channel argument, so
// gRPC does not fold them into one shared subchannel (one TCP connection).
// With coalescing on, unary Begins (without wait) and Completes go through
// one dedup::CoalescingClient per channel, as a client process would send
// them with that option (it routes by slot itself in a sharded cluster).
//
// Routing (bench/load/slot_routes.h): with RouteMode::kFixed every call goes
// over the channels to `address`; with kShard each other call, and each
// group's slice of a batch, goes straight to its group's leader, on the
// calling slot's connection; kAuto picks kShard when the cluster's shard map
// holds more than one group. Echo always goes to `address`.
#ifndef DEDUP_BENCH_LOAD_GRPC_BACKEND_H_
#define DEDUP_BENCH_LOAD_GRPC_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "bench/load/backend.h"
#include "bench/load/slot_routes.h"
#include "bench/load/timers.h"
#include "client/coalescing_client.h"
#include "dedup/v1/bench.grpc.pb.h"
#include "dedup/v1/dedup.grpc.pb.h"

namespace dedup::bench {

class GrpcBackend : public Backend {
 public:
  // `coalesce_in_flight` > 0: batches of each kind in flight per channel
  // of a CoalescingClient; 0: every call is its own RPC. `stream`: the
  // CoalescingClient sends on its Session streams (batches only if the
  // server lacks Session; 2 in flight when `coalesce_in_flight` is 0).
  GrpcBackend(std::string address, std::string ns, int channels,
              int coalesce_in_flight = 0, RouteMode route = RouteMode::kFixed,
              bool stream = false);
  ~GrpcBackend() override;

  std::string name() const override { return "dedup"; }
  int connections() const override { return channels_; }
  std::string Start() override;
  void Stop() override;
  void RunAt(int conn, Clock::time_point when,
             std::function<void()> fn) override;
  void Begin(int conn, const BeginCall& call, Done<BeginAnswer> done) override;
  void Complete(int conn, const CompleteCall& call,
                Done<FencedAnswer> done) override;
  void Release(int conn, const std::string& key, uint64_t fence,
               Done<FencedAnswer> done) override;
  void BeginBatch(int conn, const std::vector<BeginCall>& calls,
                  Done<std::vector<BeginAnswer>> done) override;
  void CompleteBatch(int conn, const std::vector<CompleteCall>& calls,
                     Done<std::vector<FencedAnswer>> done) override;
  void Echo(int conn, const std::string& payload,
            Done<std::string> done) override;
  void SetNx(int conn, const std::vector<std::string>& keys, uint32_t ttl_s,
             Done<std::string> done) override;

  // The request a Begin of this backend sends, for sizing Echo payloads.
  v1::BeginRequest ToProto(const BeginCall& call) const;

  // After Start: whether calls are routed by slot, and over how many groups
  // (0 without routing).
  int routed_groups() const { return routed_groups_; }

 private:
  // Decides the routing (kAuto) and starts the routers. Empty on success.
  std::string StartRouting();
  // Connection `conn`'s channel to `address`.
  CallTarget FixedTarget(int conn) const;
  // The destination of a call on `key` from connection `conn`.
  CallTarget TargetOf(int conn, const std::string& key) const;
  // Sends one BeginBatch / CompleteBatch RPC of `calls` to `target`.
  void SendBeginBatch(const CallTarget& target,
                      const std::vector<BeginCall>& calls,
                      Done<std::vector<BeginAnswer>> done);
  void SendCompleteBatch(const CallTarget& target,
                         const std::vector<CompleteCall>& calls,
                         Done<std::vector<FencedAnswer>> done);

  const std::string address_;
  const std::string ns_;
  const int channels_;
  const int coalesce_in_flight_;
  const bool stream_;
  const RouteMode route_;
  int routed_groups_ = 0;
  std::unique_ptr<SlotRoutes> routes_;  // null: fixed channels
  std::vector<std::shared_ptr<grpc::Channel>> dedup_channels_;
  std::vector<std::unique_ptr<v1::Dedup::Stub>> dedup_;
  std::vector<std::unique_ptr<v1::Bench::Stub>> bench_;
  std::vector<std::unique_ptr<CoalescingClient>> coalescers_;  // or empty
  std::unique_ptr<TimerThread> timers_;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LOAD_GRPC_BACKEND_H_
