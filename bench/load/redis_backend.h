// Redis 7 as a dedup peer: the protocol as one Lua script (bench/peers/redis/
// dedup.lua) called with EVALSHA, over hiredis connections that each pipeline
// the calls of every slot bound to them (see ConnLoop).
#ifndef DEDUP_BENCH_LOAD_REDIS_BACKEND_H_
#define DEDUP_BENCH_LOAD_REDIS_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "bench/load/backend.h"

namespace dedup::bench {

class RedisConn;

class RedisBackend : public Backend {
 public:
  RedisBackend(std::string host, int port, std::string ns,
               std::string script_path, int connections);
  ~RedisBackend() override;

  std::string name() const override { return "redis"; }
  int connections() const override { return connections_; }
  std::string Start() override;
  void Stop() override;
  void RunAt(int conn, Clock::time_point when,
             std::function<void()> fn) override;
  void Begin(int conn, const BeginCall& call, Done<BeginAnswer> done) override;
  void Complete(int conn, const CompleteCall& call,
                Done<FencedAnswer> done) override;
  void Release(int conn, const std::string& key, uint64_t fence,
               Done<FencedAnswer> done) override;
  // Pipelined EVALSHAs, one per item: atomic per item, one round trip.
  void BeginBatch(int conn, const std::vector<BeginCall>& calls,
                  Done<std::vector<BeginAnswer>> done) override;
  void CompleteBatch(int conn, const std::vector<CompleteCall>& calls,
                     Done<std::vector<FencedAnswer>> done) override;
  void Echo(int conn, const std::string& payload,
            Done<std::string> done) override;
  void SetNx(int conn, const std::vector<std::string>& keys, uint32_t ttl_s,
             Done<std::string> done) override;

 private:
  std::string RecordKey(const std::string& key) const;

  const std::string host_;
  const int port_;
  const std::string ns_;
  const std::string script_path_;
  const int connections_;
  std::string sha_;
  std::vector<std::unique_ptr<RedisConn>> conns_;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LOAD_REDIS_BACKEND_H_
