// PostgreSQL 15 as a dedup peer: one table (bench/peers/postgres/schema.sql),
// INSERT ... ON CONFLICT for Begin and UPDATE ... WHERE fence = $n for
// Complete, prepared once, sent over libpq pipeline mode. Every call is
// followed by its own sync point, so each is its own transaction and commit
// (as each dedupd call is durable on its own); a batch is one transaction.
// Durability is the server's synchronous_commit (set by bench/run).
#ifndef DEDUP_BENCH_LOAD_PG_BACKEND_H_
#define DEDUP_BENCH_LOAD_PG_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "bench/load/backend.h"

namespace dedup::bench {

class PgConn;

class PgBackend : public Backend {
 public:
  PgBackend(std::string conninfo, std::string ns, int connections);
  ~PgBackend() override;

  std::string name() const override { return "postgres"; }
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
  void BeginBatch(int conn, const std::vector<BeginCall>& calls,
                  Done<std::vector<BeginAnswer>> done) override;
  void CompleteBatch(int conn, const std::vector<CompleteCall>& calls,
                     Done<std::vector<FencedAnswer>> done) override;
  void Echo(int conn, const std::string& payload,
            Done<std::string> done) override;
  void SetNx(int conn, const std::vector<std::string>& keys, uint32_t ttl_s,
             Done<std::string> done) override;

 private:
  std::string RowKey(const std::string& key) const { return ns_ + ":" + key; }

  const std::string conninfo_;
  const std::string ns_;
  const int connections_;
  std::vector<std::unique_ptr<PgConn>> conns_;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LOAD_PG_BACKEND_H_
