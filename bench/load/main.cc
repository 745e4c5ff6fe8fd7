// dedup-bench: drives one system (dedupd, Redis+Lua, PostgreSQL) with one
// workload and prints throughput and latency percentiles; --json appends the
// figures for bench/run's report. Exits 1 when any call failed or answered
// other than the workload expects, 2 on bad usage or when the system cannot
// be reached.
//
//   dedup-bench --system=dedup --address=127.0.0.1:50051 --workload=unique
//   dedup-bench --system=redis --redis_port=6390 --workload=batch --batch=100
//   dedup-bench --system=postgres --pg="host=/tmp/pg port=5439 dbname=bench"
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/load/grpc_backend.h"
#include "bench/load/pg_backend.h"
#include "bench/load/redis_backend.h"
#include "bench/load/report.h"
#include "bench/load/runner.h"
#include "bench/load/workloads.h"

ABSL_FLAG(std::string, system, "dedup", "dedup, redis or postgres");
ABSL_FLAG(std::string, config, "",
          "label of the system's configuration in the report (e.g. sync)");
ABSL_FLAG(std::string, address, "127.0.0.1:50051", "dedupd address");
ABSL_FLAG(int, redis_port, 6379, "Redis port on 127.0.0.1");
ABSL_FLAG(std::string, redis_script, DEDUP_BENCH_PEERS_DIR "/redis/dedup.lua",
          "the protocol as a Redis Lua script");
ABSL_FLAG(std::string, pg, "host=127.0.0.1 port=5432 dbname=bench",
          "libpq connection string");
ABSL_FLAG(std::string, ns, "bench", "namespace of every key");
ABSL_FLAG(std::string, workload, "unique",
          "unique, begin, duplicates, hot, batch, beginbatch, echo or setnx");
ABSL_FLAG(int, outstanding, 64, "operations in flight at once (slots)");
ABSL_FLAG(int, connections, 4,
          "gRPC channels / Redis or PostgreSQL connections; slots are spread "
          "over them");
ABSL_FLAG(double, seconds, 10, "measured duration");
ABSL_FLAG(double, warmup, 1, "seconds run before measuring");
ABSL_FLAG(std::vector<std::string>, server_pid, {},
          "the server under test, to report its CPU per unit (none by "
          "default); comma-separated PIDs for the nodes of a replicated "
          "group, whose CPU is summed (each node does the whole work)");
ABSL_FLAG(double, rate, 0,
          "open loop: operations/s across all slots (0 = closed loop)");
ABSL_FLAG(int, batch, 100, "keys per BeginBatch/CompleteBatch");
ABSL_FLAG(int, setnx_pipeline, 16, "SET NX EX per round trip (setnx)");
ABSL_FLAG(double, dup_pct, 50, "duplicates: percent of Begins on done keys");
ABSL_FLAG(int, prepopulate, 10000, "duplicates: completed keys made first");
ABSL_FLAG(int, hot_keys, 4, "hot: keys every slot fights over");
ABSL_FLAG(int, wait_ms, 0, "hot: Begin's wait_ms (dedupd only)");
ABSL_FLAG(int, result_bytes, 16, "size of each Complete's result");
ABSL_FLAG(int, coalesce, 0,
          "dedup: send unary Begins (without wait) and Completes through the "
          "C++ CoalescingClient, with this many batches of each kind in "
          "flight per channel (0: one RPC per call)");
ABSL_FLAG(bool, stream, false,
          "dedup: send unary Begins (without wait) and Completes through the "
          "C++ CoalescingClient's Session stream (one bidirectional stream "
          "per channel, self-clocked frames; batch RPCs with --coalesce's "
          "batches in flight, 2 when unset, if the server has no Session); "
          "without it, --coalesce uses batch RPCs only");
ABSL_FLAG(std::string, route, "auto",
          "dedup: where calls go. fixed: all over the --connections "
          "channels to --address (in a sharded cluster that node forwards "
          "each call of a group it does not lead to the group's leader); "
          "shard: by slot, as a sharded client does: Cluster.ShardMap is "
          "fetched from --address and each call, and each group's slice of "
          "a batch, goes straight to its group's leader (exits 2 without a "
          "map); auto: shard when the map holds more than one group, else "
          "fixed. Echo always goes to --address");
ABSL_FLAG(std::string, json, "", "append the figures as one JSON line here");

namespace dedup::bench {
namespace {

std::unique_ptr<Backend> MakeBackend(const std::string& system) {
  const int conns = absl::GetFlag(FLAGS_connections);
  const std::string ns = absl::GetFlag(FLAGS_ns);
  if (system == "dedup") {
    RouteMode route;
    if (!ParseRouteMode(absl::GetFlag(FLAGS_route), &route)) return nullptr;
    return std::make_unique<GrpcBackend>(absl::GetFlag(FLAGS_address), ns,
                                         conns, absl::GetFlag(FLAGS_coalesce),
                                         route, absl::GetFlag(FLAGS_stream));
  }
  if (system == "redis") {
    return std::make_unique<RedisBackend>(
        "127.0.0.1", absl::GetFlag(FLAGS_redis_port), ns,
        absl::GetFlag(FLAGS_redis_script), conns);
  }
  if (system == "postgres") {
    return std::make_unique<PgBackend>(absl::GetFlag(FLAGS_pg), ns, conns);
  }
  return nullptr;
}

// The Echo payload matches the size of a Begin of this run (fresh key,
// 32-byte args_hash, owner), so Echo moves as many bytes as Begin.
int EchoBytes(const WorkloadOptions& w) {
  GrpcBackend sizing("", absl::GetFlag(FLAGS_ns), 0);
  BeginCall call{absl::StrCat("begin-", w.run_id, "-12-123456-0"),
                 std::string(32, 'h'), absl::StrCat("owner-", w.run_id, "-12")};
  const int size = static_cast<int>(sizing.ToProto(call).ByteSizeLong());
  return size > 2 ? size - 2 : 1;  // less EchoRequest's own tag and length
}

int Main() {
  const std::string system = absl::GetFlag(FLAGS_system);
  WorkloadOptions w;
  w.name = absl::GetFlag(FLAGS_workload);
  w.run_id =
      absl::StrCat(std::chrono::system_clock::now().time_since_epoch().count() /
                       1000 % 1'000'000'000'000,
                   "-", getpid());
  w.batch = absl::GetFlag(FLAGS_batch);
  w.setnx_pipeline = absl::GetFlag(FLAGS_setnx_pipeline);
  w.dup_fraction = absl::GetFlag(FLAGS_dup_pct) / 100.0;
  w.prepopulate = absl::GetFlag(FLAGS_prepopulate);
  w.hot_keys = absl::GetFlag(FLAGS_hot_keys);
  w.wait_ms = absl::GetFlag(FLAGS_wait_ms);
  w.result_bytes = absl::GetFlag(FLAGS_result_bytes);
  w.echo_bytes = EchoBytes(w);
  std::unique_ptr<Workload> workload = Workload::Create(w);
  std::unique_ptr<Backend> backend = MakeBackend(system);
  if (workload == nullptr || backend == nullptr || w.batch < 1 ||
      w.prepopulate < 1 || w.hot_keys < 1 ||
      absl::GetFlag(FLAGS_outstanding) < 1 ||
      absl::GetFlag(FLAGS_connections) < 1) {
    std::cerr << "dedup-bench: bad --system, --workload, --route or sizes\n";
    return 2;
  }
  if (std::string e = backend->Start(); !e.empty()) {
    std::cerr << "dedup-bench: " << system << ": " << e << "\n";
    return 2;
  }
  if (auto* grpc = dynamic_cast<GrpcBackend*>(backend.get());
      grpc != nullptr && grpc->routed_groups() > 0) {
    std::cerr << "dedup-bench: routing by slot to the leaders of "
              << grpc->routed_groups() << " groups\n";
  }
  RunOptions o;
  o.outstanding = absl::GetFlag(FLAGS_outstanding);
  o.warmup_s = absl::GetFlag(FLAGS_warmup);
  o.duration_s = absl::GetFlag(FLAGS_seconds);
  o.rate = absl::GetFlag(FLAGS_rate);
  for (const std::string& pid : absl::GetFlag(FLAGS_server_pid)) {
    int n = 0;
    if (!absl::SimpleAtoi(pid, &n) || n <= 0) {
      std::cerr << "dedup-bench: bad --server_pid " << pid << "\n";
      backend->Stop();
      return 2;
    }
    o.server_pids.push_back(n);
  }
  if (std::string e = workload->Prepare(*backend, o.outstanding); !e.empty()) {
    std::cerr << "dedup-bench: " << e << "\n";
    backend->Stop();
    return 1;
  }
  const RunResult r = Run(*backend, *workload, o);
  if (r.unfinished == 0) backend->Stop();

  RunLabel label{
      system,        absl::GetFlag(FLAGS_config), w.name, workload->unit(),
      o.outstanding, backend->connections(),      o.rate};
  std::cout << TableHeader() << "\n" << TableRow(label, r) << "\n";
  std::cout << "statuses:";
  for (int i = 0; i < 4; ++i) {
    if (r.counters.begin[i]) {
      std::cout << " " << Name(BeginStatus(i)) << "=" << r.counters.begin[i];
    }
  }
  for (int i = 0; i < 4; ++i) {
    if (r.counters.fenced[i]) {
      std::cout << " " << Name(FencedStatus(i)) << "=" << r.counters.fenced[i];
    }
  }
  std::cout << "  load-generator cpu: "
            << (r.cpu_user_s + r.cpu_sys_s) / r.seconds * 100 << "%";
  if (r.server_cpu_s >= 0 && r.units > 0) {
    std::cout << "  server cpu: " << r.server_cpu_s / r.seconds * 100
              << "% = " << r.server_cpu_s / r.units * 1e6 << " us/"
              << workload->unit();
  }
  if (r.steal_fraction >= 0) {
    std::cout << "  steal: " << r.steal_fraction * 100 << "%";
  }
  std::cout << "\n";
  if (r.counters.errors > 0) {
    std::cerr << "dedup-bench: " << r.counters.errors
              << " errors; first: " << r.counters.first_error << "\n";
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream(path, std::ios::app) << Json(label, r);
  }
  std::cout.flush();
  // The figures are out. gRPC's threads may still be returning from the
  // last callbacks (or, with unanswered calls, may yet run them), and
  // destructors running under them crashed the process at exit ("double
  // free") about once in a hundred runs: leave without running any.
  _exit(r.unfinished == 0 && r.counters.errors == 0 ? 0 : 1);
}

}  // namespace
}  // namespace dedup::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return dedup::bench::Main();
}
