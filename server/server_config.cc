#include "server/server_config.h"

#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, address, "127.0.0.1:50051",
          "host:port to serve gRPC on; port 0 picks a free port (printed at "
          "start)");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1:9464",
          "host:port serving Prometheus /metrics; empty disables; port 0 "
          "picks a free port (printed at start)");
ABSL_FLAG(std::string, metrics_token_file, "",
          "file holding a bearer token: /metrics then answers 401 to every "
          "request without \"Authorization: Bearer <token>\" (the page "
          "names tenants and their stored bytes). Read at start");
ABSL_FLAG(std::string, health_address, "",
          "host:port of a second, plaintext listener serving only the "
          "standard gRPC health service (grpc.health.v1), for probes that "
          "cannot speak TLS (kubelet's); empty: none; port 0 picks a free "
          "port (printed at start)");
ABSL_FLAG(std::string, ready_file, "",
          "once serving, write a JSON file here (atomically) with the pid, "
          "mode, node id and every bound address (server/ready_file.h); "
          "removed at a clean stop. Empty: none");
ABSL_FLAG(std::vector<std::string>, metrics_namespaces, {},
          "comma-separated namespaces that get their own label value in "
          "dedup_namespace_begin_total{dedup_namespace}; others count as "
          "'other' (keeps label cardinality bounded)");
ABSL_FLAG(std::string, event_log, "stdout",
          "where JSON event lines (duplicates, takeovers, stale fences, "
          "conflicts) go: stdout, stderr (mixed with the log lines), off, or "
          "a file path (appended to)");
ABSL_FLAG(double, event_log_sample_rate, 1.0,
          "fraction of events logged, 0..1");
ABSL_FLAG(std::string, event_log_key_file, "",
          "secret of the event log's key hashes (HMAC-SHA256); made at the "
          "first start when missing. Default: <data_dir>/event-log.key. Give "
          "the nodes of a group the same file to compare their hashes");
ABSL_FLAG(bool, event_log_raw_keys, false,
          "log raw keys instead of a SHA-256 prefix (keys may hold customer "
          "data)");
ABSL_FLAG(std::string, data_dir, "./data",
          "directory of the RocksDB database (created if missing)");
ABSL_FLAG(std::string, durability, "sync",
          "sync: answer after the WAL is fsynced (writes share fsyncs); "
          "async: WAL fsynced every --async_sync_interval_ms; none: no WAL "
          "(tests, benchmarks)");
ABSL_FLAG(int32_t, storage_shards, 4,
          "storage threads; each batches its keys' writes into one write");
ABSL_FLAG(int64_t, max_queued_per_shard, 100000,
          "operations a storage shard may have queued before new ones get "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, async_sync_interval_ms, 100,
          "WAL fsync period in --durability=async");
ABSL_FLAG(int64_t, memory_budget_mb, 128,
          "RocksDB memory budget, MiB: block cache plus memtables (at most "
          "half); resident memory stays near it whatever the record count. "
          "With --groups, split between the groups a node hosts, at least 8 "
          "MiB each");
ABSL_FLAG(int64_t, min_free_disk_mb, -1,
          "writes are refused (UNAVAILABLE, health NOT_SERVING) while the "
          "data dir's filesystem has less free space than this, MiB, and "
          "come back by themselves once it has more; -1: "
          "--memory_budget_mb (room to flush every memtable; in a group "
          "64 MiB more, for the Raft log, and a leader below it hands "
          "leadership to another member); 0: no check (RocksDB, or in a "
          "group libraft, then meets a full disk itself: a group node stops "
          "with exit code 6)");
ABSL_FLAG(int64_t, write_retry_interval_ms, 1000,
          "after RocksDB could not write (disk full, I/O error), how often "
          "it is asked to resume");
ABSL_FLAG(bool, verify_data_at_open, true,
          "check every block of every table file before opening the data "
          "dir (about 0.1 s per million records): a damaged file refuses "
          "the start (exit 3) instead of failing the reads that meet it");
ABSL_FLAG(int64_t, compaction_grace_s, 60,
          "expired records are dropped by compactions this long after expiry");
ABSL_FLAG(int64_t, periodic_compaction_s, 6 * 3600,
          "every SST file is recompacted (dropping expired records) at least "
          "this often");
ABSL_FLAG(int64_t, shutdown_grace_ms, 10000,
          "on SIGTERM/SIGINT, how long in-flight calls get to finish");
ABSL_FLAG(int64_t, lame_duck_ms, 250,
          "on SIGTERM/SIGINT, how long at least new calls are answered "
          "UNAVAILABLE (retryable) before connections close, so a client "
          "sending right then retries instead of seeing CANCELLED");
ABSL_FLAG(std::string, log_level, "info",
          "lowest level of the log lines written to stderr: debug, info, "
          "warning or error");
ABSL_FLAG(std::string, log_format, "json",
          "format of the log lines on stderr: json (one object per line: ts, "
          "level, component, msg) or text (for people)");
ABSL_FLAG(uint32_t, default_ttl_s, 24 * 3600, "TTL when a request gives 0");
ABSL_FLAG(uint32_t, min_ttl_s, 1, "smallest ttl_s accepted");
ABSL_FLAG(uint32_t, max_ttl_s, 30 * 24 * 3600, "largest ttl_s accepted");
ABSL_FLAG(uint32_t, default_lease_ms, 60 * 1000,
          "lease when a request gives 0");
ABSL_FLAG(uint32_t, min_lease_ms, 100, "smallest lease_ms accepted");
ABSL_FLAG(uint32_t, max_lease_ms, 3600 * 1000, "largest lease_ms accepted");
ABSL_FLAG(uint32_t, max_wait_ms, 60 * 1000, "largest wait_ms accepted");
ABSL_FLAG(uint32_t, max_key_bytes, 255, "longest key accepted");
ABSL_FLAG(uint32_t, max_namespace_bytes, 128,
          "longest namespace accepted (at most 255)");
ABSL_FLAG(uint32_t, max_owner_bytes, 128, "longest owner accepted");
ABSL_FLAG(uint32_t, max_args_hash_bytes, 64, "longest args_hash accepted");
ABSL_FLAG(uint32_t, max_result_bytes, 1 << 20, "largest result accepted");
ABSL_FLAG(uint32_t, max_checkpoint_data_bytes, 64 << 10,
          "largest Checkpoint data accepted");
ABSL_FLAG(uint32_t, tombstone_retention_s, 7 * 24 * 3600,
          "how long a completed record's tombstone (fence, outcome, "
          "completed_at, args_hash; no result) is kept after the record "
          "expires, so that a late Begin answers EXPIRED instead of running "
          "the operation again; 0: no tombstones (a late Begin starts afresh)");
ABSL_FLAG(std::string, policy_file, "",
          "JSON file of per-namespace policies (defaults and limits of TTL "
          "and lease, max result bytes, tombstone retention, what an ERROR "
          "outcome means); reloaded on SIGHUP and by Admin.ReloadPolicy; an "
          "invalid file keeps the policy in force");
ABSL_FLAG(uint32_t, max_batch_items, 1000,
          "most items in a BeginBatch or CompleteBatch");
ABSL_FLAG(uint32_t, max_batch_response_bytes, 3 << 20,
          "stored results one BeginBatch answer may carry (>= "
          "--max_result_bytes); DUPLICATE items past it are answered "
          "UNAVAILABLE, which clients ask again");
ABSL_FLAG(int32_t, max_concurrent_streams, 1000,
          "calls in flight on one client connection");
ABSL_FLAG(int64_t, max_connection_idle_ms, 5 * 60 * 1000,
          "a client connection with no call for this long is closed");
ABSL_FLAG(int64_t, handshake_timeout_ms, 10000,
          "a connection that has not finished its handshake by then is "
          "closed");
ABSL_FLAG(bool, enable_bench_service, false,
          "serve dedup.v1.Bench (Echo), the bare-gRPC baseline for benchmarks");
ABSL_FLAG(int32_t, serving_thread_nice, 10,
          "nice value (0-19) of the threads that handle client calls, so that "
          "when this node's CPU runs short its Raft and disk threads run "
          "first and its leaders keep leadership; 0 keeps them at the "
          "process's priority");

namespace dedup {
namespace {

absl::Status StoreFromFlags(StoreOptions& store) {
  store.path = absl::GetFlag(FLAGS_data_dir);
  if (store.path.empty()) {
    return absl::InvalidArgumentError("--data_dir: must not be empty");
  }
  const std::string durability = absl::GetFlag(FLAGS_durability);
  if (durability == "sync") {
    store.durability = Durability::kSync;
  } else if (durability == "async") {
    store.durability = Durability::kAsync;
  } else if (durability == "none") {
    store.durability = Durability::kNone;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--durability: must be sync, async or none, got '", durability, "'"));
  }
  store.shards = absl::GetFlag(FLAGS_storage_shards);
  if (store.shards < 1 || store.shards > 256) {
    return absl::InvalidArgumentError("--storage_shards: must be 1..256");
  }
  const int64_t max_queued = absl::GetFlag(FLAGS_max_queued_per_shard);
  if (max_queued < 1) {
    return absl::InvalidArgumentError("--max_queued_per_shard: must be >= 1");
  }
  store.max_queued_per_shard = static_cast<size_t>(max_queued);
  store.async_sync_interval_ms = absl::GetFlag(FLAGS_async_sync_interval_ms);
  if (store.async_sync_interval_ms < 1) {
    return absl::InvalidArgumentError("--async_sync_interval_ms: must be >= 1");
  }
  const int64_t budget_mb = absl::GetFlag(FLAGS_memory_budget_mb);
  if (budget_mb < 8) {
    return absl::InvalidArgumentError("--memory_budget_mb: must be >= 8");
  }
  store.memory_budget_bytes = static_cast<size_t>(budget_mb) << 20;
  const int64_t min_free_mb = absl::GetFlag(FLAGS_min_free_disk_mb);
  if (min_free_mb < -1 || min_free_mb > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        "--min_free_disk_mb: must be -1 (the memory budget), 0 (no check) or "
        "a size in MiB");
  }
  store.min_free_disk_bytes = min_free_mb < 0 ? -1 : min_free_mb << 20;
  store.write_retry_interval_ms = absl::GetFlag(FLAGS_write_retry_interval_ms);
  if (store.write_retry_interval_ms < 10 ||
      store.write_retry_interval_ms > 60 * 1000) {
    return absl::InvalidArgumentError(
        "--write_retry_interval_ms: must be 10..60000");
  }
  store.verify_data_at_open = absl::GetFlag(FLAGS_verify_data_at_open);
  store.compaction_grace_ms = absl::GetFlag(FLAGS_compaction_grace_s) * 1000;
  if (store.compaction_grace_ms < 0) {
    return absl::InvalidArgumentError("--compaction_grace_s: must be >= 0");
  }
  const int64_t periodic = absl::GetFlag(FLAGS_periodic_compaction_s);
  if (periodic < 0) {
    return absl::InvalidArgumentError("--periodic_compaction_s: must be >= 0");
  }
  store.periodic_compaction_s = static_cast<uint64_t>(periodic);
  return absl::OkStatus();
}

void LimitsFromFlags(Limits& limits) {
  limits.default_ttl_s = absl::GetFlag(FLAGS_default_ttl_s);
  limits.min_ttl_s = absl::GetFlag(FLAGS_min_ttl_s);
  limits.max_ttl_s = absl::GetFlag(FLAGS_max_ttl_s);
  limits.default_lease_ms = absl::GetFlag(FLAGS_default_lease_ms);
  limits.min_lease_ms = absl::GetFlag(FLAGS_min_lease_ms);
  limits.max_lease_ms = absl::GetFlag(FLAGS_max_lease_ms);
  limits.max_wait_ms = absl::GetFlag(FLAGS_max_wait_ms);
  limits.max_key_bytes = absl::GetFlag(FLAGS_max_key_bytes);
  limits.max_namespace_bytes = absl::GetFlag(FLAGS_max_namespace_bytes);
  limits.max_owner_bytes = absl::GetFlag(FLAGS_max_owner_bytes);
  limits.max_args_hash_bytes = absl::GetFlag(FLAGS_max_args_hash_bytes);
  limits.max_result_bytes = absl::GetFlag(FLAGS_max_result_bytes);
  limits.max_batch_items = absl::GetFlag(FLAGS_max_batch_items);
  limits.max_checkpoint_data_bytes =
      absl::GetFlag(FLAGS_max_checkpoint_data_bytes);
  limits.tombstone_retention_s = absl::GetFlag(FLAGS_tombstone_retention_s);
  limits.max_batch_response_bytes =
      absl::GetFlag(FLAGS_max_batch_response_bytes);
}

absl::Status TransportFromFlags(TransportLimits& transport) {
  transport.max_concurrent_streams =
      absl::GetFlag(FLAGS_max_concurrent_streams);
  transport.max_connection_idle_ms =
      absl::GetFlag(FLAGS_max_connection_idle_ms);
  transport.handshake_timeout_ms = absl::GetFlag(FLAGS_handshake_timeout_ms);
  if (transport.max_concurrent_streams < 1) {
    return absl::InvalidArgumentError("--max_concurrent_streams: must be >= 1");
  }
  for (const auto& [flag, value] :
       {std::pair<const char*, int64_t>{"max_connection_idle_ms",
                                        transport.max_connection_idle_ms},
        {"handshake_timeout_ms", transport.handshake_timeout_ms}}) {
    if (value < 100 || value > int64_t{24} * 3600 * 1000) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": must be 100..86400000"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void ApplyLogFormatFlag() {
  absl::StatusOr<LogFormat> format =
      ParseLogFormat(absl::GetFlag(FLAGS_log_format));
  if (format.ok()) SetLogFormat(*format);
}

absl::StatusOr<ServerConfig> ServerConfigFromFlags() {
  ServerConfig config;
  config.address = absl::GetFlag(FLAGS_address);
  if (config.address.empty()) {
    return absl::InvalidArgumentError("--address: must not be empty");
  }

  config.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  config.metrics_token_file = absl::GetFlag(FLAGS_metrics_token_file);
  config.health_address = absl::GetFlag(FLAGS_health_address);
  config.ready_file = absl::GetFlag(FLAGS_ready_file);
  config.metrics_namespaces = absl::GetFlag(FLAGS_metrics_namespaces);
  for (const std::string& ns : config.metrics_namespaces) {
    if (ns.empty() || ns == "other") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--metrics_namespaces: '", ns, "' is reserved or empty"));
    }
  }
  config.event_log.destination = absl::GetFlag(FLAGS_event_log);
  config.event_log.sample_rate = absl::GetFlag(FLAGS_event_log_sample_rate);
  if (config.event_log.sample_rate < 0 || config.event_log.sample_rate > 1) {
    return absl::InvalidArgumentError("--event_log_sample_rate: must be 0..1");
  }
  config.event_log.raw_keys = absl::GetFlag(FLAGS_event_log_raw_keys);
  config.event_log.key_file = absl::GetFlag(FLAGS_event_log_key_file);

  if (absl::Status s = StoreFromFlags(config.store); !s.ok()) return s;
  config.shutdown_grace_ms = absl::GetFlag(FLAGS_shutdown_grace_ms);
  config.lame_duck_ms = absl::GetFlag(FLAGS_lame_duck_ms);
  if (config.lame_duck_ms < 0 ||
      config.lame_duck_ms > config.shutdown_grace_ms) {
    return absl::InvalidArgumentError(
        "--lame_duck_ms: must be between 0 and --shutdown_grace_ms");
  }

  absl::StatusOr<LogLevel> log_level =
      ParseLogLevel(absl::GetFlag(FLAGS_log_level));
  if (!log_level.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--log_level: ", log_level.status().message()));
  }
  config.log_level = *log_level;
  absl::StatusOr<LogFormat> log_format =
      ParseLogFormat(absl::GetFlag(FLAGS_log_format));
  if (!log_format.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--log_format: ", log_format.status().message()));
  }
  config.log_format = *log_format;

  LimitsFromFlags(config.limits);
  config.policy_file = absl::GetFlag(FLAGS_policy_file);
  config.enable_bench_service = absl::GetFlag(FLAGS_enable_bench_service);
  config.serving_thread_nice = absl::GetFlag(FLAGS_serving_thread_nice);
  if (config.serving_thread_nice < 0 || config.serving_thread_nice > 19) {
    return absl::InvalidArgumentError("--serving_thread_nice: must be 0 to 19");
  }
  if (absl::Status s = TransportFromFlags(config.transport); !s.ok()) {
    return s;
  }
  if (absl::Status s = config.limits.Check(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", s.message()));
  }
  return config;
}

}  // namespace dedup
