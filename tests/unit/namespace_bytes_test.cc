// Bytes stored per namespace (storage/namespace_bytes.h), kept by the
// single-node store and the replicated state, checked against what RocksDB
// actually holds (read by a separate read-only open of the same directory).
#include "storage/namespace_bytes.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "storage/db_options.h"
#include "storage/replicated_state.h"
#include "storage/storage_key.h"
#include "storage/store.h"
#include "tests/testing/server_process.h"
#include "tests/unit/store_test_util.h"

namespace dedup {
namespace {

using ::dedup::testing::Await;
using ::dedup::testing::MakeBeginParams;
using ::dedup::testing::MakeTempDir;
using Bytes = absl::flat_hash_map<std::string, int64_t>;

constexpr int64_t kT0 = 1'700'000'000'000;

// What the database at `path` holds per namespace, by a full scan of a
// read-only open (it replays the WAL, so synced writes are included).
Bytes ActualBytes(const std::string& path) {
  rocksdb::Options options = RecordDbOptions(RecordDbTuning());
  options.create_if_missing = false;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(options, path, &raw);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return {};
  std::unique_ptr<rocksdb::DB> db(raw);
  Bytes bytes;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(TotalOrderScan()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const absl::string_view key(it->key().data(), it->key().size());
    if (!IsRecordKey(key)) break;
    bytes[std::string(NamespaceOfStorageKey(key))] +=
        static_cast<int64_t>(it->key().size() + it->value().size());
  }
  EXPECT_TRUE(it->status().ok());
  return bytes;
}

TEST(NamespaceBytesTest, SumsDropsZerosAndBoundsNamespaces) {
  NamespaceBytes bytes(/*max_namespaces=*/2);
  bytes.Add("a", 10);
  bytes.Add("b", 5);
  bytes.Add("c", 7);  // past the bound: not kept
  bytes.Add("a", -4);
  Bytes merged;
  bool truncated = false;
  bytes.MergeInto(merged, truncated);
  EXPECT_TRUE(truncated);
  EXPECT_EQ(merged, (Bytes{{"a", 6}, {"b", 5}}));

  bytes.Clear();
  bytes.Add("b", 3);
  bytes.Add("b", -3);  // back to zero frees its place
  bytes.Add("c", 1);
  bytes.Add("d", 2);
  merged.clear();
  truncated = false;
  bytes.MergeInto(merged, truncated);
  EXPECT_FALSE(truncated);
  EXPECT_EQ(merged, (Bytes{{"c", 1}, {"d", 2}}));

  NamespaceBytes records(/*max_namespaces=*/10);
  records.AddRecord(EncodeStorageKey("ns", "k"), 9);
  records.AddRecord(FenceReservationKey(), 100);  // metadata: ignored
  merged.clear();
  records.MergeInto(merged, truncated);
  EXPECT_EQ(merged, (Bytes{{"ns", 9}}));
}

TEST(NamespaceBytesTest, AccountMergesWritersAndScan) {
  StoredBytesAccount account(/*writers=*/2, /*max_namespaces=*/10);
  EXPECT_FALSE(account.Snapshot().complete);
  account.BeginScan();
  account.scanned().Add("a", 100);
  account.writer(0).Add("a", 20);
  account.writer(1).Add("b", 30);
  account.dropped().Add("a", -120);  // "a" now empty: not reported
  StoredBytes snapshot = account.Snapshot();
  EXPECT_FALSE(snapshot.complete);
  EXPECT_EQ(snapshot.by_namespace, (Bytes{{"b", 30}}));
  account.FinishScan(true);
  EXPECT_TRUE(account.Snapshot().complete);
  account.BeginScan();  // a new starting point forgets everything
  snapshot = account.Snapshot();
  EXPECT_FALSE(snapshot.complete);
  EXPECT_TRUE(snapshot.by_namespace.empty());
}

class StoreBytesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = MakeTempDir("dedup-ns-bytes");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *std::move(dir);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Open(int shards = 4, size_t max_namespaces = 100'000) {
    store_.reset();
    StoreOptions o;
    o.path = dir_;
    o.durability = Durability::kSync;
    o.clock = &clock_;
    o.compaction_grace_ms = 1000;
    o.shards = shards;
    o.max_tracked_namespaces = max_namespaces;
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  // The figures once the scan after open has finished.
  StoredBytes Figures() {
    StoredBytes bytes = store_->StoredBytesByNamespace();
    for (int i = 0; i < 10'000 && !bytes.complete; ++i) {
      absl::SleepFor(absl::Milliseconds(1));
      bytes = store_->StoredBytesByNamespace();
    }
    EXPECT_TRUE(bytes.complete) << "the scan after open never finished";
    return bytes;
  }

  uint64_t Begin(const std::string& ns, const std::string& key,
                 uint32_t ttl_s = 3600) {
    auto r = Await<BeginResult>([&](StoreCallback<BeginResult> cb) {
      store_->Begin(ns, key, MakeBeginParams("owner", "h", 10'000, ttl_s), 0,
                    std::move(cb));
    });
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->decision.record.fence : 0;
  }
  void Complete(const std::string& ns, const std::string& key, uint64_t fence,
                const std::string& result, uint32_t ttl_s = 0) {
    auto r = Await<FencedDecision>([&](StoreCallback<FencedDecision> cb) {
      store_->Complete(ns, key,
                       CompleteParams{fence, Outcome::kSuccess, result, ttl_s},
                       std::move(cb));
    });
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, FencedStatus::kOk);
  }
  void Forget(const std::string& ns, const std::string& key) {
    auto r = Await<bool>([&](StoreCallback<bool> cb) {
      store_->Forget(ns, key, std::move(cb));
    });
    ASSERT_TRUE(r.ok()) << r.status();
  }

  std::string dir_;
  FakeClock clock_{kT0};
  std::unique_ptr<Store> store_;
};

TEST_F(StoreBytesTest, WritesOverwritesAndDeletesMatchWhatIsStored) {
  Open();
  EXPECT_TRUE(Figures().by_namespace.empty());
  std::vector<uint64_t> fences;
  for (int i = 0; i < 20; ++i) {
    fences.push_back(
        Begin(i % 2 == 0 ? "billing:a" : "orders", absl::StrCat("key-", i)));
  }
  StoredBytes after_begins = Figures();
  EXPECT_EQ(after_begins.by_namespace, ActualBytes(dir_));
  EXPECT_EQ(after_begins.by_namespace.size(), 2u);

  // Completing overwrites each STARTED record with a larger one.
  for (int i = 0; i < 20; ++i) {
    Complete(i % 2 == 0 ? "billing:a" : "orders", absl::StrCat("key-", i),
             fences[i], std::string(1000 + i, 'r'));
  }
  StoredBytes after_completes = Figures();
  EXPECT_EQ(after_completes.by_namespace, ActualBytes(dir_));
  EXPECT_GT(after_completes.by_namespace["billing:a"], 10 * 1000);

  // Batches (several keys of a shard in one write) count the same way.
  std::vector<Store::BeginCall> calls;
  for (int i = 0; i < 30; ++i) {
    calls.push_back(Store::BeginCall{"batch", absl::StrCat("b-", i % 10),
                                     MakeBeginParams("o"),
                                     [](absl::StatusOr<BeginResult>) {}});
  }
  store_->BeginMany(std::move(calls));
  // Answered once durable: a Get afterwards on every shard orders after it.
  for (int i = 0; i < 10; ++i) {
    auto got = Await<std::optional<Record>>(
        [&](StoreCallback<std::optional<Record>> cb) {
          store_->Get("batch", absl::StrCat("b-", i), std::move(cb));
        });
    ASSERT_TRUE(got.ok());
    EXPECT_TRUE(got->has_value());
  }
  EXPECT_EQ(Figures().by_namespace, ActualBytes(dir_));

  // Deletes subtract what the record held: the namespace empties.
  for (int i = 1; i < 20; i += 2) Forget("orders", absl::StrCat("key-", i));
  StoredBytes after_forgets = Figures();
  EXPECT_EQ(after_forgets.by_namespace, ActualBytes(dir_));
  EXPECT_FALSE(after_forgets.by_namespace.contains("orders"));
  EXPECT_FALSE(after_forgets.truncated);
}

TEST_F(StoreBytesTest, CompactionDropsSubtractAndReopenScanAgrees) {
  Open();
  for (int i = 0; i < 10; ++i) {
    const std::string key = absl::StrCat("short-", i);
    Complete("a", key, Begin("a", key, 1), std::string(500, 'x'), 1);
  }
  for (int i = 0; i < 5; ++i) {
    const std::string key = absl::StrCat("long-", i);
    Complete("a", key, Begin("a", key), std::string(700, 'y'));
    Complete("b", key, Begin("b", key), std::string(300, 'z'));
  }
  const Bytes before = Figures().by_namespace;
  EXPECT_EQ(before, ActualBytes(dir_));

  // Expired but within the grace period: kept, still counted.
  clock_.Advance(1000);
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_EQ(Figures().by_namespace, before);
  // Past it: the filter drops them and their bytes go.
  clock_.Advance(1000);
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_EQ(store_->Stats().expired_dropped, 10u);
  const Bytes after = Figures().by_namespace;
  EXPECT_EQ(after, ActualBytes(dir_));
  EXPECT_LT(after.at("a"), before.at("a"));
  EXPECT_EQ(after.at("b"), before.at("b"));

  // A restart counts again from the scan: the same figures.
  Open();
  EXPECT_EQ(Figures().by_namespace, after);
  // ...and keeps counting from there.
  Forget("b", "long-0");
  EXPECT_EQ(Figures().by_namespace, ActualBytes(dir_));
}

TEST_F(StoreBytesTest, NamespacesPastTheBoundAreReportedTruncated) {
  Open(/*shards=*/1, /*max_namespaces=*/2);
  Begin("a", "k");
  Begin("b", "k");
  EXPECT_FALSE(Figures().truncated);
  Begin("c", "k");
  StoredBytes bytes = Figures();
  EXPECT_TRUE(bytes.truncated);
  EXPECT_EQ(bytes.by_namespace.size(), 2u);
}

LogEntry Entry(int64_t now_ms, std::vector<LogOp> ops) {
  LogEntry entry;
  entry.now_ms = now_ms;
  entry.ops = std::move(ops);
  return entry;
}

LogBegin BeginOp(const std::string& ns, const std::string& key) {
  LogBegin op;
  op.skey = EncodeStorageKey(ns, key);
  op.params.owner = "o";
  op.params.args_hash = "h";
  op.params.lease_ms = 10'000;
  op.params.ttl_s = 3600;
  return op;
}

LogComplete CompleteOp(const std::string& ns, const std::string& key,
                       uint64_t fence, size_t result_bytes) {
  LogComplete op;
  op.skey = EncodeStorageKey(ns, key);
  op.params.fence = fence;
  op.params.outcome = Outcome::kSuccess;
  op.params.result = std::string(result_bytes, 'r');
  return op;
}

LogForget ForgetOp(const std::string& ns, const std::string& key) {
  return LogForget{EncodeStorageKey(ns, key)};
}

TEST(ReplicatedStateBytesTest, ApplyCountsAndReopenScanAgrees) {
  absl::StatusOr<std::string> dir = MakeTempDir("dedup-ns-bytes-rs");
  ASSERT_TRUE(dir.ok());
  ReplicatedStateOptions options;
  options.path = *dir + "/state";
  options.memory_budget_bytes = 16 << 20;
  auto open = [&options]() -> std::unique_ptr<ReplicatedState> {
    absl::StatusOr<std::unique_ptr<ReplicatedState>> state =
        ReplicatedState::Open(options);
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? *std::move(state) : nullptr;
  };
  auto complete = [](ReplicatedState& state) {
    StoredBytes bytes = state.StoredBytesByNamespace();
    for (int i = 0; i < 10'000 && !bytes.complete; ++i) {
      absl::SleepFor(absl::Milliseconds(1));
      bytes = state.StoredBytesByNamespace();
    }
    EXPECT_TRUE(bytes.complete);
    return bytes.by_namespace;
  };
  Bytes expected;
  {
    std::unique_ptr<ReplicatedState> state = open();
    ASSERT_NE(state, nullptr);
    std::vector<LogOp> begins;
    for (int i = 0; i < 6; ++i) {
      begins.push_back(BeginOp(i < 3 ? "x" : "y", absl::StrCat("k", i % 3)));
    }
    ASSERT_TRUE(state->Apply(1, Entry(1000, std::move(begins))).ok());
    // One entry naming a key twice: Complete then Forget of the same key.
    std::vector<LogOp> ops;
    ops.push_back(CompleteOp("x", "k0", 1, 2000));
    ops.push_back(CompleteOp("y", "k0", 4, 3000));
    ops.push_back(ForgetOp("x", "k1"));
    ops.push_back(ForgetOp("y", "k1"));
    ops.push_back(ForgetOp("y", "k2"));
    ops.push_back(ForgetOp("y", "k0"));
    ASSERT_TRUE(state->Apply(2, Entry(2000, std::move(ops))).ok());
    expected = complete(*state);
    EXPECT_GT(expected["x"], 2000);
    EXPECT_FALSE(expected.contains("y"));
    ASSERT_TRUE(state->Close().ok());
  }
  EXPECT_EQ(expected, ActualBytes(options.path));
  std::unique_ptr<ReplicatedState> state = open();
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(complete(*state), expected);
  state.reset();
  std::filesystem::remove_all(*dir);
}

}  // namespace
}  // namespace dedup
