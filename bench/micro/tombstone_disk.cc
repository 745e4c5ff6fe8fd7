// Disk per record: N completed records (32-byte args_hash, 16-byte owner,
// `--result_bytes` results) compacted while live, then again once they are
// tombstones (expired, retained), then once the retention has passed. Prints
// bytes per record of live SST files at each stage, so the cost of keeping
// tombstones is a ratio against live records measured in the same run.
//
// usage: tombstone_disk [--records=N] [--result_bytes=B]
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "storage/clock.h"
#include "storage/store.h"

ABSL_FLAG(int, records, 200'000, "completed records written");
ABSL_FLAG(int, result_bytes, 64, "bytes of each result");

namespace dedup {
namespace {

constexpr int64_t kStart = 1'700'000'000'000;
constexpr uint32_t kTtlS = 3600;
constexpr int64_t kRetentionMs = 7 * 86'400'000LL;

int Run() {
  const int n = absl::GetFlag(FLAGS_records);
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "dedup-tombstones-XXXXXX")
          .string();
  const std::string path = mkdtemp(tmpl.data());
  FakeClock clock(kStart);
  StoreOptions options;
  options.path = path;
  options.durability = Durability::kNone;
  options.clock = &clock;
  options.compaction_grace_ms = 0;
  options.verify_data_at_open = false;
  std::unique_ptr<Store> store = *Store::Open(options);

  // Random bytes, as real SHA-256 hashes and most results are: repeated
  // bytes would compress into flattering figures.
  uint64_t x = 88172645463325252ull;
  auto random_bytes = [&x](size_t n) {
    std::string s(n, '\0');
    for (char& c : s) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      c = static_cast<char>(x);
    }
    return s;
  };
  // Write in waves so memory stays bounded.
  const int result_bytes = absl::GetFlag(FLAGS_result_bytes);
  constexpr int kWave = 5000;
  for (int start = 0; start < n; start += kWave) {
    const int count = std::min(kWave, n - start);
    absl::BlockingCounter begun(count);
    std::vector<uint64_t> fences(count);
    for (int i = 0; i < count; ++i) {
      BeginParams p;
      p.args_hash = random_bytes(32);
      p.owner = "0123456789abcdef";
      p.lease_ms = 1000;
      p.ttl_s = kTtlS;
      store->Begin("tools:send_email", absl::StrCat("key-", start + i), p, 0,
                   [&, i](absl::StatusOr<BeginResult> r) {
                     fences[i] = r.ok() ? r->decision.record.fence : 0;
                     begun.DecrementCount();
                   });
    }
    begun.Wait();
    absl::BlockingCounter completed(count);
    for (int i = 0; i < count; ++i) {
      CompleteParams c;
      c.fence = fences[i];
      c.outcome = Outcome::kSuccess;
      c.result = random_bytes(result_bytes);
      c.retention_ms = kRetentionMs;
      store->Complete(
          "tools:send_email", absl::StrCat("key-", start + i), c,
          [&](absl::StatusOr<FencedDecision>) { completed.DecrementCount(); });
    }
    completed.Wait();
  }
  auto report = [&](const char* stage) {
    if (absl::Status s = store->CompactAll(); !s.ok()) {
      std::fprintf(stderr, "compact: %s\n", s.ToString().c_str());
    }
    const StoreStats stats = store->Stats();
    const double per = static_cast<double>(stats.live_sst_bytes) / n;
    std::printf("%-28s live_sst_bytes=%llu  bytes/record=%.1f\n", stage,
                static_cast<unsigned long long>(stats.live_sst_bytes), per);
    return per;
  };
  const double live = report("live (completed)");
  clock.Advance(int64_t{kTtlS} * 1000 + 1);
  const double tomb = report("tombstones (expired)");
  clock.Advance(kRetentionMs);
  report("after retention");
  std::printf("tombstone / live record = %.2f (result_bytes=%d, records=%d)\n",
              tomb / live, absl::GetFlag(FLAGS_result_bytes), n);
  store.reset();
  std::filesystem::remove_all(path);
  return 0;
}

}  // namespace
}  // namespace dedup

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return dedup::Run();
}
