// The load loop: `outstanding` slots spread over the backend's connections,
// each running the workload's operation back to back (closed loop) or on its
// own schedule (open loop, --rate), for warmup + duration. Latency is
// measured from when an operation was due, not when it could start, so a
// stalled server shows up as latency instead of hiding in fewer samples
// (no coordinated omission).
#ifndef DEDUP_BENCH_LOAD_RUNNER_H_
#define DEDUP_BENCH_LOAD_RUNNER_H_

#include <string>

#include "bench/load/backend.h"
#include "bench/load/histogram.h"
#include "bench/load/workloads.h"

namespace dedup::bench {

struct RunOptions {
  int outstanding = 64;
  double warmup_s = 1;
  double duration_s = 10;
  double rate = 0;     // operations/s across all slots; 0 = closed loop
  int server_pid = 0;  // the server under test on this machine; 0 = unknown
};

struct RunResult {
  double seconds = 0;       // measured window
  uint64_t ops = 0;         // operations completed in the window
  uint64_t units = 0;       // their units (keys for batches)
  Histogram latency;        // per operation, in the window
  SlotCounters counters;    // whole run, warmup included
  uint64_t unfinished = 0;  // operations still outstanding at the end
  double cpu_user_s = 0, cpu_sys_s = 0;  // this process, in the window
  double server_cpu_s = -1;  // server_pid's user + system CPU; -1 = unknown
  // Share of the machine's CPU time the hypervisor gave to others (steal) in
  // the window, 0..1; -1 = unknown. High values mean a noisy neighbour.
  double steal_fraction = -1;
};

RunResult Run(Backend& backend, Workload& workload, const RunOptions& options);

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LOAD_RUNNER_H_
