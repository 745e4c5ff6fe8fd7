// The workload definitions, shared by every system under test: each is an
// operation a slot repeats (closed loop) or starts on a schedule (--rate).
// An operation may be several calls (Begin then Complete); it reports how
// many units it did (keys for batches) and checks every answer against what
// the workload expects, so a wrong answer counts as an error, not a result.
#ifndef DEDUP_BENCH_LOAD_WORKLOADS_H_
#define DEDUP_BENCH_LOAD_WORKLOADS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/load/backend.h"

namespace dedup::bench {

struct WorkloadOptions {
  std::string name;    // unique, begin, duplicates, hot, batch, echo, setnx
  std::string run_id;  // makes keys unique across runs on the same data
  int batch = 100;     // keys per BeginBatch/CompleteBatch
  int setnx_pipeline = 16;
  double dup_fraction = 0.5;  // duplicates: share of Begins on completed keys
  int prepopulate = 10'000;   // duplicates: completed keys made before
  int hot_keys = 4;           // hot: how many keys all slots fight over
  uint32_t wait_ms = 0;       // hot: Begin's wait_ms
  int result_bytes = 16;
  int echo_bytes = 0;  // echo: payload size (the workload's BeginRequest)
};

// Counters of one slot (callbacks of a slot never run concurrently).
struct SlotCounters {
  std::array<uint64_t, 4> begin{};   // by BeginStatus
  std::array<uint64_t, 4> fenced{};  // by FencedStatus
  uint64_t errors = 0;
  std::string first_error;
  void Error(const std::string& e) {
    if (errors++ == 0) first_error = e;
  }
};

// Outcome of one operation: units done (0 when it failed).
using OpDone = std::function<void(int units)>;

class Workload {
 public:
  static std::unique_ptr<Workload> Create(const WorkloadOptions& options);
  virtual ~Workload() = default;
  // Runs before the clock starts (e.g. completed keys for duplicates), with
  // `slots` closed-loop callers. Empty string on success.
  virtual std::string Prepare(Backend& backend, int slots) { return ""; }
  // One operation of `slot` (bound to connection `conn`); `seq` numbers the
  // slot's operations.
  virtual void Run(Backend& backend, int slot, int conn, uint64_t seq,
                   SlotCounters& counters, OpDone done) = 0;
  // What a unit is, for the report ("pairs", "keys", "calls").
  virtual const char* unit() const = 0;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LOAD_WORKLOADS_H_
