// What recording a call's metrics costs: the per-call work dedupd always
// does, whether or not /metrics is served.
#include "benchmark/benchmark.h"
#include "server/metrics.h"

namespace dedup {
namespace {

void BM_RecordBeginAndDuration(benchmark::State& state) {
  Metrics metrics({"billing", "mail"});
  BeginResult result;
  result.decision.status = BeginStatus::kStarted;
  for (auto _ : state) {
    metrics.RecordBegin("billing", result);
    metrics.ObserveDuration(Method::kBegin, 0.00042);
  }
}
BENCHMARK(BM_RecordBeginAndDuration)->Threads(1)->Threads(2);

void BM_RecordWrite(benchmark::State& state) {
  Metrics metrics({});
  for (auto _ : state) metrics.OnWrite(17, 0.0003);
}
BENCHMARK(BM_RecordWrite);

}  // namespace
}  // namespace dedup
