#include "server/collectors.h"

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <utility>

namespace dedup {

prometheus::MetricFamily NewFamily(std::string name, std::string help,
                                   prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}
namespace {

prometheus::MetricFamily Single(std::string name, std::string help,
                                prometheus::MetricType type, double value) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
  return family;
}

prometheus::MetricFamily Gauge(std::string name, std::string help,
                               double value) {
  return Single(std::move(name), std::move(help), prometheus::MetricType::Gauge,
                value);
}

double NowSeconds() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Fields of /proc/self/stat after the command name: utime and stime are the
// 12th and 13th (1-based, counting from the state field), rss the 22nd.
struct ProcStat {
  double cpu_seconds = 0;
  double resident_bytes = 0;
  bool ok = false;
};

ProcStat ReadProcStat() {
  ProcStat out;
  std::ifstream file("/proc/self/stat");
  std::string line;
  if (!std::getline(file, line)) return out;
  // The command name is parenthesised and may contain spaces.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return out;
  std::istringstream rest(line.substr(close + 2));
  std::vector<std::string> fields;
  for (std::string field; rest >> field;) fields.push_back(field);
  if (fields.size() < 22) return out;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  out.cpu_seconds = (std::stod(fields[11]) + std::stod(fields[12])) / ticks;
  out.resident_bytes =
      std::stod(fields[21]) * static_cast<double>(sysconf(_SC_PAGESIZE));
  out.ok = true;
  return out;
}

double CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  double count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // the descriptor opendir itself holds
}

}  // namespace

std::vector<prometheus::MetricFamily> StoreCollector::Collect() const {
  const StoreStats s = store_->Stats();
  std::vector<prometheus::MetricFamily> out;
  out.push_back(Gauge("dedup_records",
                      "Records stored (RocksDB estimate; includes expired "
                      "records not yet compacted away)",
                      static_cast<double>(s.estimated_records)));
  out.push_back(Gauge("dedup_inflight_leases",
                      "Records in flight with a live lease",
                      static_cast<double>(s.inflight_leases)));
  out.push_back(Gauge("dedup_lapsed_leases",
                      "Records in flight whose lease ran out with nobody "
                      "taking over (usually a crashed owner)",
                      static_cast<double>(s.lapsed_leases)));
  out.push_back(Gauge("dedup_oldest_lapsed_lease_seconds",
                      "How long ago the oldest lapsed lease ran out",
                      static_cast<double>(s.oldest_lapsed_lease_ms) / 1000));
  out.push_back(Gauge("dedup_inflight_tracking_saturated",
                      "1 when the lease figures undercount: more records "
                      "are in flight than they track, or they are still "
                      "being loaded from disk after a start",
                      s.inflight_tracking_saturated ? 1 : 0));
  out.push_back(Gauge("dedup_waiting_begins",
                      "Begin calls parked waiting for an owner's outcome",
                      static_cast<double>(s.waiting_begins)));
  out.push_back(Single("dedup_expired_dropped_total",
                       "Expired records dropped by the compaction filter",
                       prometheus::MetricType::Counter,
                       static_cast<double>(s.expired_dropped)));
  out.push_back(Single("dedup_tombstones_dropped_total",
                       "Tombstones dropped by the compaction filter once "
                       "their retention (--tombstone_retention_s) ended",
                       prometheus::MetricType::Counter,
                       static_cast<double>(s.tombstones_dropped)));
  out.push_back(Single("dedup_tombstones_made_total",
                       "Expired completed records the compaction filter "
                       "shrank into their tombstone (result dropped)",
                       prometheus::MetricType::Counter,
                       static_cast<double>(s.tombstones_made)));
  out.push_back(Gauge("dedup_rocksdb_live_sst_bytes", "Bytes of live SST files",
                      static_cast<double>(s.live_sst_bytes)));
  out.push_back(Gauge("dedup_rocksdb_pending_compaction_bytes",
                      "Bytes RocksDB estimates compaction must rewrite",
                      static_cast<double>(s.pending_compaction_bytes)));
  out.push_back(Gauge("dedup_rocksdb_block_cache_usage_bytes",
                      "Bytes held by the block cache",
                      static_cast<double>(s.block_cache_usage_bytes)));
  out.push_back(Gauge("dedup_rocksdb_memtable_bytes", "Bytes held by memtables",
                      static_cast<double>(s.memtable_bytes)));
  out.push_back(Gauge("dedup_storage_write_stopped",
                      "1 while writes are refused because the data dir's "
                      "filesystem is nearly full or RocksDB cannot write "
                      "(see the health status and the log for why)",
                      s.write_stopped ? 1 : 0));
  out.push_back(Single("dedup_storage_background_errors_total",
                       "Errors RocksDB reported (failed WAL writes or syncs, "
                       "flushes, compactions), whether or not they stopped "
                       "writes",
                       prometheus::MetricType::Counter,
                       static_cast<double>(s.background_errors)));
  out.push_back(Single("dedup_storage_write_resumes_total",
                       "Times writes came back by themselves after being "
                       "stopped",
                       prometheus::MetricType::Counter,
                       static_cast<double>(s.write_resumes)));
  out.push_back(Gauge("dedup_data_dir_free_bytes",
                      "Free bytes on the data dir's filesystem, as last "
                      "measured (0 when the free-space check is off)",
                      static_cast<double>(s.data_dir_free_bytes)));
  return out;
}

ProcessCollector::ProcessCollector(std::string version, std::string git_sha)
    : version_(std::move(version)),
      git_sha_(std::move(git_sha)),
      start_time_seconds_(NowSeconds()) {}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  prometheus::MetricFamily build =
      Gauge("dedup_build_info", "Build of this dedupd (value is always 1)", 1);
  build.metric[0].label = {{"git_sha", git_sha_}, {"version", version_}};
  out.push_back(std::move(build));
  const ProcStat stat = ReadProcStat();
  if (stat.ok) {
    out.push_back(Single("process_cpu_seconds_total",
                         "User and system CPU time spent, in seconds",
                         prometheus::MetricType::Counter, stat.cpu_seconds));
    out.push_back(Gauge("process_resident_memory_bytes",
                        "Resident memory size in bytes", stat.resident_bytes));
  }
  out.push_back(Gauge("process_open_fds", "Number of open file descriptors",
                      CountOpenFds()));
  out.push_back(Gauge("process_start_time_seconds",
                      "Start time of the process since the Unix epoch",
                      start_time_seconds_));
  return out;
}

}  // namespace dedup
