// The RocksDB store: Begin on new keys, Begin on completed keys, Complete,
// in `none` and `sync` durability, with `concurrency` operations in flight
// (the store batches whatever is queued into one write per shard).
#include <sys/resource.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "benchmark/benchmark.h"
#include "storage/store.h"

namespace dedup {
namespace {

class TempStore {
 public:
  explicit TempStore(Durability durability) {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "dedup-bench-XXXXXX")
            .string();
    path_ = mkdtemp(tmpl.data());
    StoreOptions options;
    options.path = path_;
    options.durability = durability;
    store_ = *Store::Open(options);
  }
  ~TempStore() {
    store_.reset();
    std::filesystem::remove_all(path_);
  }
  Store& store() { return *store_; }

 private:
  std::string path_;
  std::unique_ptr<Store> store_;
};

BeginParams Params() {
  BeginParams p;
  p.args_hash = std::string(32, 'h');
  p.owner = "owner";
  p.lease_ms = 60'000;
  p.ttl_s = 86400;
  return p;
}

// CPU seconds (user + system) of the whole process, every storage thread
// included: the cost per item, less disturbed by other tenants than time.
double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

Durability DurabilityArg(const benchmark::State& state) {
  return state.range(0) == 0 ? Durability::kNone : Durability::kSync;
}

// Issues `concurrency` Begins (keys from `key_of`) and waits for all.
template <typename KeyOf>
void BeginWave(Store& store, int concurrency, KeyOf key_of,
               std::atomic<int>* failures) {
  absl::BlockingCounter done(concurrency);
  for (int i = 0; i < concurrency; ++i) {
    store.Begin("bench", key_of(i), Params(), 0,
                [&](absl::StatusOr<BeginResult> r) {
                  if (!r.ok()) failures->fetch_add(1);
                  done.DecrementCount();
                });
  }
  done.Wait();
}

void BM_StoreBeginNewKey(benchmark::State& state) {
  TempStore db(DurabilityArg(state));
  const int concurrency = static_cast<int>(state.range(1));
  std::atomic<int> failures{0};
  int64_t next = 0;
  for (auto _ : state) {
    BeginWave(
        db.store(), concurrency, [&](int) { return absl::StrCat("k", next++); },
        &failures);
  }
  state.SetItemsProcessed(state.iterations() * concurrency);
  if (failures.load() != 0) state.SkipWithError("store errors");
}
BENCHMARK(BM_StoreBeginNewKey)
    ->ArgNames({"sync", "concurrency"})
    ->Args({0, 1})
    ->Args({0, 64})
    ->Args({1, 1})
    ->Args({1, 64})
    ->UseRealTime();

void BM_StoreBeginDuplicate(benchmark::State& state) {
  TempStore db(DurabilityArg(state));
  const int concurrency = static_cast<int>(state.range(1));
  std::atomic<int> failures{0};
  constexpr int kKeys = 1024;
  for (int i = 0; i < kKeys; i += concurrency) {
    BeginWave(
        db.store(), concurrency,
        [&](int j) { return absl::StrCat("d", (i + j) % kKeys); }, &failures);
  }
  int64_t next = 0;
  for (auto _ : state) {
    BeginWave(
        db.store(), concurrency,
        [&](int) { return absl::StrCat("d", next++ % kKeys); }, &failures);
  }
  state.SetItemsProcessed(state.iterations() * concurrency);
  if (failures.load() != 0) state.SkipWithError("store errors");
}
BENCHMARK(BM_StoreBeginDuplicate)
    ->ArgNames({"sync", "concurrency"})
    ->Args({0, 64})
    ->Args({1, 64})
    ->UseRealTime();

void BM_StoreBeginComplete(benchmark::State& state) {
  TempStore db(DurabilityArg(state));
  const int concurrency = static_cast<int>(state.range(1));
  std::atomic<int> failures{0};
  int64_t next = 0;
  for (auto _ : state) {
    absl::BlockingCounter done(concurrency);
    for (int i = 0; i < concurrency; ++i) {
      std::string key = absl::StrCat("c", next++);
      Store& store = db.store();
      store.Begin(
          "bench", key, Params(), 0,
          [&store, &done, &failures, key](absl::StatusOr<BeginResult> r) {
            if (!r.ok()) {
              failures.fetch_add(1);
              done.DecrementCount();
              return;
            }
            store.Complete(
                "bench", key,
                CompleteParams{r->decision.record.fence, Outcome::kSuccess,
                               "ok", 0},
                [&done, &failures](absl::StatusOr<FencedDecision> d) {
                  if (!d.ok()) failures.fetch_add(1);
                  done.DecrementCount();
                });
          });
    }
    done.Wait();
  }
  state.SetItemsProcessed(state.iterations() * concurrency);
  if (failures.load() != 0) state.SkipWithError("store errors");
}
BENCHMARK(BM_StoreBeginComplete)
    ->ArgNames({"sync", "concurrency"})
    ->Args({0, 64})
    ->Args({1, 64})
    ->UseRealTime();

// BeginMany on new keys, `waves` batches of `batch` in flight at once: the
// storage side of BeginBatch. Reports process CPU per key as `cpu_us/key`.
void BM_StoreBeginManyNewKeys(benchmark::State& state) {
  TempStore db(DurabilityArg(state));
  const int batch = static_cast<int>(state.range(1));
  constexpr int kWaves = 8;
  std::atomic<int> failures{0};
  int64_t next = 0;
  const double cpu_before = ProcessCpuSeconds();
  for (auto _ : state) {
    absl::BlockingCounter done(kWaves * batch);
    for (int w = 0; w < kWaves; ++w) {
      std::vector<Store::BeginCall> calls;
      calls.reserve(batch);
      for (int i = 0; i < batch; ++i) {
        calls.push_back(Store::BeginCall{"bench", absl::StrCat("m", next++),
                                         Params(),
                                         [&](absl::StatusOr<BeginResult> r) {
                                           if (!r.ok()) failures.fetch_add(1);
                                           done.DecrementCount();
                                         }});
      }
      db.store().BeginMany(std::move(calls));
    }
    done.Wait();
  }
  const double keys = static_cast<double>(state.iterations()) * kWaves * batch;
  state.SetItemsProcessed(static_cast<int64_t>(keys));
  state.counters["cpu_us/key"] =
      (ProcessCpuSeconds() - cpu_before) / keys * 1e6;
  if (failures.load() != 0) state.SkipWithError("store errors");
}
BENCHMARK(BM_StoreBeginManyNewKeys)
    ->ArgNames({"sync", "batch"})
    ->Args({0, 100})
    ->Args({1, 100})
    ->UseRealTime()
    ->MinTime(3);

// BeginMany of 100 Begins naming one completed key whose result is
// `result_bytes` long, under a 64 KiB ResultBudget (as a BeginBatch has):
// 64 B results are all answered DUPLICATE, 256 KiB ones all refused by the
// budget. A refused one should cost what a small DUPLICATE costs, whatever
// the size of the result it did not send (cpu_us/key).
void BM_StoreDuplicatesUnderResultBudget(benchmark::State& state) {
  TempStore db(Durability::kNone);
  const size_t result_bytes = static_cast<size_t>(state.range(0));
  constexpr int kBatch = 100;
  Store& store = db.store();
  absl::Notification completed;
  store.Begin("bench", "big", Params(), 0, [&](absl::StatusOr<BeginResult> r) {
    store.Complete("bench", "big",
                   CompleteParams{r->decision.record.fence, Outcome::kSuccess,
                                  std::string(result_bytes, 'r'), 0},
                   [&](absl::StatusOr<FencedDecision>) { completed.Notify(); });
  });
  completed.WaitForNotification();
  std::atomic<int> duplicates{0};
  std::atomic<int> refused{0};
  const double cpu_before = ProcessCpuSeconds();
  for (auto _ : state) {
    ResultBudget budget(64 << 10);
    absl::BlockingCounter done(kBatch);
    std::vector<Store::BeginCall> calls;
    calls.reserve(kBatch);
    for (int i = 0; i < kBatch; ++i) {
      calls.push_back(Store::BeginCall{
          "bench", "big", Params(),
          [&](absl::StatusOr<BeginResult> r) {
            if (r.ok() && r->decision.status == BeginStatus::kDuplicate) {
              duplicates.fetch_add(1);
            } else if (!r.ok() && r.status().GetPayload(kResultBudgetPayload)) {
              refused.fetch_add(1);
            }
            done.DecrementCount();
          },
          &budget});
    }
    store.BeginMany(std::move(calls));
    done.Wait();
  }
  const double keys = static_cast<double>(state.iterations()) * kBatch;
  state.SetItemsProcessed(static_cast<int64_t>(keys));
  state.counters["cpu_us/key"] =
      (ProcessCpuSeconds() - cpu_before) / keys * 1e6;
  state.counters["refused"] = refused.load() / keys;
  if (duplicates.load() + refused.load() != keys) {
    state.SkipWithError("answers other than DUPLICATE or a budget refusal");
  }
}
BENCHMARK(BM_StoreDuplicatesUnderResultBudget)
    ->ArgNames({"result_bytes"})
    ->Arg(64)
    ->Arg(256 << 10)
    ->UseRealTime();

}  // namespace
}  // namespace dedup
