// Prints a run as a table row (humans) and as JSON (bench/run's report).
#ifndef DEDUP_BENCH_LOAD_REPORT_H_
#define DEDUP_BENCH_LOAD_REPORT_H_

#include <string>

#include "bench/load/runner.h"

namespace dedup::bench {

struct RunLabel {
  std::string system;  // e.g. "dedup", "redis"
  std::string config;  // e.g. "sync", "appendfsync=always"
  std::string workload;
  std::string unit;
  int outstanding = 0;
  int connections = 0;
  double rate = 0;
};

std::string TableHeader();
std::string TableRow(const RunLabel& label, const RunResult& result);
std::string Json(const RunLabel& label, const RunResult& result);

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LOAD_REPORT_H_
