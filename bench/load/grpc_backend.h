// dedupd over gRPC with the callback API: calls are started from any thread
// and answered on gRPC's own threads, so N outstanding calls need no thread
// each. Each of the `channels` channels gets a distinct channel argument, so
// gRPC does not fold them into one shared subchannel (one TCP connection).
// With coalescing on, unary Begins (without wait) and Completes go through
// one dedup::CoalescingClient per channel, as a client process would send
// them with that option.
#ifndef DEDUP_BENCH_LOAD_GRPC_BACKEND_H_
#define DEDUP_BENCH_LOAD_GRPC_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "bench/load/backend.h"
#include "bench/load/timers.h"
#include "client/coalescing_client.h"
#include "dedup/v1/bench.grpc.pb.h"
#include "dedup/v1/dedup.grpc.pb.h"

namespace dedup::bench {

class GrpcBackend : public Backend {
 public:
  // `coalesce_in_flight` > 0: batches of each kind in flight per channel
  // of a CoalescingClient; 0: every call is its own RPC.
  GrpcBackend(std::string address, std::string ns, int channels,
              int coalesce_in_flight = 0);
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

 private:
  const std::string address_;
  const std::string ns_;
  const int channels_;
  const int coalesce_in_flight_;
  std::vector<std::unique_ptr<v1::Dedup::Stub>> dedup_;
  std::vector<std::unique_ptr<v1::Bench::Stub>> bench_;
  std::vector<std::unique_ptr<CoalescingClient>> coalescers_;  // or empty
  std::unique_ptr<TimerThread> timers_;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LOAD_GRPC_BACKEND_H_
