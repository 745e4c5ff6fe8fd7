// The load loop: `outstanding` slots spread over the backend's connections,
// each running the workload's operation back to back (closed loop) or on its
// own schedule (open loop, --rate), for warmup + duration. Latency is
// measured from when an operation was due, not when it could start, so a
// stalled server shows up as latency instead of hiding in fewer samples
// (no coordinated omission).
#ifndef DEDUP_BENCH_LOAD_RUNNER_H_
#define DEDUP_BENCH_LOAD_RUNNER_H_

#include <string>
#include <vector>

#include "bench/load/backend.h"
#include "bench/load/histogram.h"
#include "bench/load/workloads.h"

namespace dedup::bench {

struct RunOptions {
  int outstanding = 64;
  double warmup_s = 1;
  double duration_s = 10;
  double rate = 0;  // operations/s across all slots; 0 = closed loop
  // The server under test on this machine: one process, or every node of a
  // replicated group (each does the whole work: their CPU is summed).
  // Empty = unknown.
  std::vector<int> server_pids;
};

struct RunResult {
  double seconds = 0;       // measured window
  uint64_t ops = 0;         // operations completed in the window
  uint64_t units = 0;       // their units (keys for batches)
  Histogram latency;        // per operation, in the window
  SlotCounters counters;    // whole run, warmup included
  uint64_t unfinished = 0;  // operations still outstanding at the end
  double cpu_user_s = 0, cpu_sys_s = 0;  // this process, in the window
  // server_pids' user + system CPU, summed; -1 = unknown (none given, or
  // one was gone).
  double server_cpu_s = -1;
  // Share of the machine's CPU time the hypervisor gave to others (steal) in
  // the window, 0..1; -1 = unknown. High values mean a noisy neighbour.
  double steal_fraction = -1;
};

RunResult Run(Backend& backend, Workload& workload, const RunOptions& options);

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LOAD_RUNNER_H_
