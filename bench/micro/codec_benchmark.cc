// Record codec and state machine: the per-request CPU work outside RocksDB
// and gRPC.
#include <optional>
#include <string>

#include "benchmark/benchmark.h"
#include "storage/authority.h"
#include "storage/record.h"

namespace dedup {
namespace {

Record TypicalCompletedRecord() {
  Record r;
  r.state = RecordState::kCompleted;
  r.outcome = Outcome::kSuccess;
  r.attempts = 1;
  r.expire_at_ms = 1'700'086'400'000;
  r.lease_until_ms = 1'700'000'000'500;
  r.fence = 123456;
  r.created_at_ms = 1'700'000'000'000;
  r.completed_at_ms = 1'700'000'000'500;
  r.ttl_s = 86400;
  r.args_hash = std::string(32, 'h');
  r.owner = "0b7e2c1a-5d4f-4e3b-9a8c-7f6e5d4c3b2a";
  r.result = std::string(200, 'r');  // a small JSON tool result
  return r;
}

void BM_EncodeRecord(benchmark::State& state) {
  const Record r = TypicalCompletedRecord();
  for (auto _ : state) benchmark::DoNotOptimize(EncodeRecord(r));
}
BENCHMARK(BM_EncodeRecord);

void BM_DecodeRecord(benchmark::State& state) {
  const std::string value = EncodeRecord(TypicalCompletedRecord());
  for (auto _ : state) benchmark::DoNotOptimize(DecodeRecord(value));
}
BENCHMARK(BM_DecodeRecord);

void BM_PeekExpireAt(benchmark::State& state) {
  const std::string value = EncodeRecord(TypicalCompletedRecord());
  for (auto _ : state) benchmark::DoNotOptimize(PeekExpireAt(value));
}
BENCHMARK(BM_PeekExpireAt);

BeginParams Params() {
  BeginParams p;
  p.args_hash = std::string(32, 'h');
  p.owner = "owner";
  p.lease_ms = 60'000;
  p.ttl_s = 86400;
  return p;
}

void BM_DecideBeginNewKey(benchmark::State& state) {
  const BeginParams params = Params();
  uint64_t fence = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(DecideBegin(
        std::nullopt, params, 1'700'000'000'000, [&] { return ++fence; }));
  }
}
BENCHMARK(BM_DecideBeginNewKey);

void BM_DecideBeginDuplicate(benchmark::State& state) {
  const std::optional<Record> stored = TypicalCompletedRecord();
  const BeginParams params = Params();
  for (auto _ : state) {
    benchmark::DoNotOptimize(DecideBegin(stored, params, 1'700'000'001'000,
                                         [] { return uint64_t{0}; }));
  }
}
BENCHMARK(BM_DecideBeginDuplicate);

void BM_DecideComplete(benchmark::State& state) {
  Record in_flight = TypicalCompletedRecord();
  in_flight.state = RecordState::kInFlight;
  in_flight.outcome = Outcome::kNone;
  in_flight.result.clear();
  const std::optional<Record> stored = in_flight;
  const CompleteParams params{in_flight.fence, Outcome::kSuccess,
                              std::string(200, 'r'), 0};
  for (auto _ : state) {
    benchmark::DoNotOptimize(DecideComplete(stored, params, 1'700'000'000'400));
  }
}
BENCHMARK(BM_DecideComplete);

}  // namespace
}  // namespace dedup
