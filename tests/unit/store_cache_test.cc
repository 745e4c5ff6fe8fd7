// Lookups in a store much larger than its memory budget find their filter
// and index blocks in the block cache instead of re-reading them from the
// table files on every call.
//
// The regression: a table's whole-file bloom filter grows with its records
// (1.25 bytes each), and once it was larger than one block-cache shard it
// could never stay cached, so every new-key Begin read and checksummed
// megabytes (throughput fell 25x past ~2.5M records). Bytes read through
// read(2)/pread(2) by this process (/proc/self/io rchar, page-cache hits
// included) show it without timing anything.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "gtest/gtest.h"
#include "storage/store.h"
#include "tests/testing/server_process.h"
#include "tests/unit/store_test_util.h"

namespace dedup {
namespace {

using ::dedup::testing::MakeTempDir;

using ::dedup::testing::GetSync;
using ::dedup::testing::MakeBeginParams;

// Bytes this process has read through read-family syscalls, if known.
std::optional<uint64_t> BytesReadByProcess() {
  std::ifstream io("/proc/self/io");
  std::string field;
  uint64_t value = 0;
  while (io >> field >> value) {
    if (field == "rchar:") return value;
  }
  return std::nullopt;
}

class StoreCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = MakeTempDir("dedup-cache");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *std::move(dir);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreCacheTest, AbsentKeyLookupsDoNotRereadTableMetadata) {
  if (!BytesReadByProcess().has_value()) {
    GTEST_SKIP() << "/proc/self/io has no rchar on this kernel";
  }
  StoreOptions options;
  options.path = dir_;
  options.durability = Durability::kNone;
  // The smallest cache RocksDB shards (512 KiB per shard), so a table of
  // 600k records has a whole-file filter (~750 KiB) larger than a shard.
  options.memory_budget_bytes = 4 << 20;
  absl::StatusOr<std::unique_ptr<Store>> opened = Store::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  store_ = *std::move(opened);

  constexpr int kRecords = 600'000;
  constexpr int kPerCall = 1000;
  for (int first = 0; first < kRecords; first += kPerCall) {
    absl::BlockingCounter answered(kPerCall);
    std::vector<Store::BeginCall> calls;
    calls.reserve(kPerCall);
    for (int i = first; i < first + kPerCall; ++i) {
      calls.push_back({"ns", absl::StrCat("k", i), MakeBeginParams("o"),
                       [&answered](absl::StatusOr<BeginResult> r) {
                         EXPECT_TRUE(r.ok()) << r.status();
                         answered.DecrementCount();
                       }});
    }
    store_->BeginMany(std::move(calls));
    answered.Wait();
  }
  // One bottom level of large tables, as a long-running node has.
  ASSERT_TRUE(store_->CompactAll().ok());

  constexpr int kLookups = 2000;
  const uint64_t before = *BytesReadByProcess();
  for (int i = 0; i < kLookups; ++i) {
    auto got = GetSync(*store_, absl::StrCat("absent-", i));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_FALSE(got->has_value());
  }
  const uint64_t read = *BytesReadByProcess() - before;
  // Cached metadata: a few KiB of partitions loaded once each. Uncached: the
  // whole filter per lookup, over 1.4 GiB here.
  EXPECT_LT(read, uint64_t{64} << 20)
      << read / kLookups << " bytes read per absent-key lookup";
  // The records are all still there.
  auto some = GetSync(*store_, "k123456");
  ASSERT_TRUE(some.ok());
  EXPECT_TRUE(some->has_value());
}

}  // namespace
}  // namespace dedup
