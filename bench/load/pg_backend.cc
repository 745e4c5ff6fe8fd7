#include "bench/load/pg_backend.h"

#include <libpq-fe.h>

#include <cstdlib>
#include <deque>
#include <utility>

#include "bench/load/conn_loop.h"

namespace dedup::bench {
namespace {

constexpr char kNowMs[] =
    "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

// $1 key, $2 args_hash, $3 owner, $4 lease_ms, $5 ttl_ms. One statement: the
// insert claims a new or expired key or takes over a lapsed lease; otherwise
// the existing row (as of the statement's snapshot) is classified.
const std::string kBeginSql =
    std::string() + "WITH now AS (SELECT " + kNowMs +
    " AS ms), "
    "ins AS ("
    " INSERT INTO dedup AS d (k, st, fence, args, owner, lease_until, expires)"
    " SELECT $1, 1, nextval('dedup_fence'), $2, $3, ms + $4::bigint,"
    "        ms + greatest($5::bigint, $4::bigint) FROM now"
    " ON CONFLICT (k) DO UPDATE SET st = 1, fence = nextval('dedup_fence'),"
    "   args = EXCLUDED.args, owner = EXCLUDED.owner,"
    "   lease_until = EXCLUDED.lease_until, expires = EXCLUDED.expires,"
    "   outcome = 0, result = NULL"
    " WHERE d.expires <= (SELECT ms FROM now)"
    "    OR (d.st = 1 AND d.args = EXCLUDED.args"
    "        AND d.lease_until <= (SELECT ms FROM now))"
    " RETURNING fence) "
    "SELECT 1, fence FROM ins "
    "UNION ALL "
    "SELECT CASE WHEN d.args <> $2 THEN 3 WHEN d.st = 2 THEN 4"
    "            WHEN $3 <> '' AND d.owner = $3 THEN 1 ELSE 2 END, d.fence"
    " FROM dedup d WHERE d.k = $1 AND NOT EXISTS (SELECT 1 FROM ins)";

// $1 key, $2 fence, $3 result, $4 ttl_ms.
const std::string kCompleteSql =
    std::string() +
    "UPDATE dedup SET st = 2, outcome = 1, result = $3,"
    " expires = " +
    kNowMs +
    " + $4::bigint"
    " WHERE k = $1 AND fence = $2::bigint AND st = 1 RETURNING 1, fence";

const std::string kReleaseSql =
    "DELETE FROM dedup WHERE k = $1 AND fence = $2::bigint AND st = 1"
    " RETURNING 1, fence";

const std::string kEchoSql = "SELECT 1, length($1::text)";

// First row of one statement: (status, fence), or no row, or an error.
struct Row {
  std::string error;
  bool found = false;
  int status = 0;
  uint64_t fence = 0;
};

}  // namespace

// One libpq connection in pipeline mode, driven by its ConnLoop thread.
class PgConn : public ConnLoop {
 public:
  using Handler = std::function<void(std::vector<Row> rows)>;

  explicit PgConn(std::string conninfo) : conninfo_(std::move(conninfo)) {}
  ~PgConn() override {
    if (conn_ != nullptr) PQfinish(conn_);
  }

  // Loop thread only. Sends the statements as one transaction (one sync).
  void Send(const std::vector<std::pair<const char*, std::vector<std::string>>>&
                statements,
            Handler handler) {
    for (const auto& [name, params] : statements) {
      std::vector<const char*> values;
      for (const std::string& p : params) values.push_back(p.c_str());
      if (!PQsendQueryPrepared(conn_, name, static_cast<int>(values.size()),
                               values.data(), nullptr, nullptr, 0)) {
        broken_ = PQerrorMessage(conn_);
      }
    }
    if (!PQpipelineSync(conn_)) broken_ = PQerrorMessage(conn_);
    want_write_ = true;
    Pending p;
    p.queries = static_cast<int>(statements.size());
    p.handler = std::move(handler);
    pending_.push_back(std::move(p));
  }

 protected:
  std::string Connect() override {
    conn_ = PQconnectdb(conninfo_.c_str());
    if (PQstatus(conn_) != CONNECTION_OK) {
      return std::string("postgres connect: ") + PQerrorMessage(conn_);
    }
    const std::pair<const char*, const std::string*> statements[] = {
        {"begin", &kBeginSql},
        {"complete", &kCompleteSql},
        {"release", &kReleaseSql},
        {"echo", &kEchoSql}};
    for (const auto& [name, sql] : statements) {
      PGresult* r = PQprepare(conn_, name, sql->c_str(), 0, nullptr);
      const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
      std::string error = ok ? "" : PQresultErrorMessage(r);
      PQclear(r);
      if (!ok) return std::string("prepare ") + name + ": " + error;
    }
    if (PQsetnonblocking(conn_, 1) != 0 || !PQenterPipelineMode(conn_)) {
      return "cannot enter pipeline mode";
    }
    return "";
  }
  int fd() override { return PQsocket(conn_); }
  bool WantWrite() override { return want_write_; }
  std::string Flush() override {
    if (!broken_.empty()) return broken_;
    const int r = PQflush(conn_);
    if (r < 0) return PQerrorMessage(conn_);
    want_write_ = r == 1;
    return "";
  }
  std::string OnReadable() override {
    if (!PQconsumeInput(conn_)) return PQerrorMessage(conn_);
    while (!pending_.empty() && !PQisBusy(conn_)) {
      Pending& p = pending_.front();
      PGresult* r = PQgetResult(conn_);
      if (r == nullptr) {
        // Ends one statement's results; more than one per statement means
        // libpq has nothing more for now.
        if (p.nulls_seen >= p.queries) break;
        ++p.nulls_seen;
        continue;
      }
      const ExecStatusType status = PQresultStatus(r);
      if (status == PGRES_PIPELINE_SYNC) {
        PQclear(r);
        Handler h = std::move(p.handler);
        std::vector<Row> rows = std::move(p.rows);
        rows.resize(p.queries);
        pending_.pop_front();
        h(std::move(rows));
        continue;
      }
      Row row;
      if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) {
        if (PQntuples(r) > 0) {
          row.found = true;
          row.status = std::atoi(PQgetvalue(r, 0, 0));
          row.fence = std::strtoull(PQgetvalue(r, 0, 1), nullptr, 10);
        }
      } else if (status == PGRES_PIPELINE_ABORTED) {
        row.error = "pipeline aborted (an earlier statement failed)";
      } else {
        row.error = PQresultErrorMessage(r);
      }
      PQclear(r);
      p.rows.push_back(std::move(row));
    }
    return "";
  }
  bool Idle() override { return pending_.empty(); }
  void FailAll(const std::string& error) override {
    while (!pending_.empty()) {
      Pending p = std::move(pending_.front());
      pending_.pop_front();
      std::vector<Row> rows(p.queries);
      for (Row& r : rows) r.error = error;
      p.handler(std::move(rows));
    }
  }

 private:
  struct Pending {
    int queries = 0;
    int nulls_seen = 0;
    std::vector<Row> rows;
    Handler handler;
  };
  const std::string conninfo_;
  PGconn* conn_ = nullptr;
  bool want_write_ = false;
  std::string broken_;
  std::deque<Pending> pending_;
};

namespace {

BeginAnswer ToBegin(const Row& row) {
  BeginAnswer a;
  a.error = row.error;
  if (!a.error.empty()) return a;
  if (!row.found) {
    // The key was inserted by a concurrent transaction after this
    // statement's snapshot: someone else holds it right now.
    a.status = BeginStatus::kInUse;
    return a;
  }
  a.fence = row.fence;
  if (row.status < 1 || row.status > 4) {
    a.error = "bad begin row";
    return a;
  }
  a.status = static_cast<BeginStatus>(row.status - 1);
  return a;
}

// The UPDATE/DELETE match on the fence; no row does not say why (stale fence,
// absent, or completed), and is reported as STALE_FENCE.
FencedAnswer ToFenced(const Row& row) {
  FencedAnswer a;
  a.error = row.error;
  a.fence = row.fence;
  a.status = row.found ? FencedStatus::kOk : FencedStatus::kStaleFence;
  return a;
}

std::vector<std::string> BeginParams(const std::string& key,
                                     const BeginCall& call) {
  return {key, call.args_hash, call.owner, std::to_string(call.lease_ms),
          std::to_string(uint64_t{call.ttl_s} * 1000)};
}

}  // namespace

PgBackend::PgBackend(std::string conninfo, std::string ns, int connections)
    : conninfo_(std::move(conninfo)),
      ns_(std::move(ns)),
      connections_(connections) {}

PgBackend::~PgBackend() = default;

std::string PgBackend::Start() {
  for (int i = 0; i < connections_; ++i) {
    conns_.push_back(std::make_unique<PgConn>(conninfo_));
    std::string e = conns_.back()->Start();
    if (!e.empty()) return e;
  }
  return "";
}

void PgBackend::Stop() {
  for (auto& c : conns_) c->Stop();
  conns_.clear();
}

void PgBackend::RunAt(int conn, Clock::time_point when,
                      std::function<void()> fn) {
  conns_[conn]->Post(when, std::move(fn));
}

void PgBackend::Begin(int conn, const BeginCall& call, Done<BeginAnswer> done) {
  conns_[conn]->Send({{"begin", BeginParams(RowKey(call.key), call)}},
                     [done = std::move(done)](std::vector<Row> rows) {
                       done(ToBegin(rows[0]));
                     });
}

void PgBackend::Complete(int conn, const CompleteCall& call,
                         Done<FencedAnswer> done) {
  conns_[conn]->Send(
      {{"complete",
        {RowKey(call.key), std::to_string(call.fence), call.result,
         std::to_string(uint64_t{call.ttl_s} * 1000)}}},
      [done = std::move(done)](std::vector<Row> rows) {
        done(ToFenced(rows[0]));
      });
}

void PgBackend::Release(int conn, const std::string& key, uint64_t fence,
                        Done<FencedAnswer> done) {
  conns_[conn]->Send({{"release", {RowKey(key), std::to_string(fence)}}},
                     [done = std::move(done)](std::vector<Row> rows) {
                       done(ToFenced(rows[0]));
                     });
}

void PgBackend::BeginBatch(int conn, const std::vector<BeginCall>& calls,
                           Done<std::vector<BeginAnswer>> done) {
  std::vector<std::pair<const char*, std::vector<std::string>>> statements;
  for (const BeginCall& c : calls) {
    statements.push_back({"begin", BeginParams(RowKey(c.key), c)});
  }
  conns_[conn]->Send(statements,
                     [done = std::move(done)](std::vector<Row> rows) {
                       std::vector<BeginAnswer> answers;
                       for (const Row& r : rows) answers.push_back(ToBegin(r));
                       done(std::move(answers));
                     });
}

void PgBackend::CompleteBatch(int conn, const std::vector<CompleteCall>& calls,
                              Done<std::vector<FencedAnswer>> done) {
  std::vector<std::pair<const char*, std::vector<std::string>>> statements;
  for (const CompleteCall& c : calls) {
    statements.push_back({"complete",
                          {RowKey(c.key), std::to_string(c.fence), c.result,
                           std::to_string(uint64_t{c.ttl_s} * 1000)}});
  }
  conns_[conn]->Send(statements,
                     [done = std::move(done)](std::vector<Row> rows) {
                       std::vector<FencedAnswer> answers;
                       for (const Row& r : rows) answers.push_back(ToFenced(r));
                       done(std::move(answers));
                     });
}

void PgBackend::Echo(int conn, const std::string& payload,
                     Done<std::string> done) {
  conns_[conn]->Send(
      {{"echo", {payload}}},
      [done = std::move(done)](std::vector<Row> rows) { done(rows[0].error); });
}

void PgBackend::SetNx(int conn, const std::vector<std::string>& keys,
                      uint32_t ttl_s, Done<std::string> done) {
  done("postgres has no SET NX primitive (use the batch workload)");
}

}  // namespace dedup::bench
