// The slot memtable (storage/slot_memtable.h), tested through RocksDB's
// public API only: Debian's headers do not ship the memtable internals
// (Allocator, LookupKey), and a real database is how the store uses it. Every
// check compares what a reader of the database observes (Get, forward and
// backward scans, seeks, direction switches) with a std::map model.
#include "storage/slot_memtable.h"

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/listener.h"
#include "rocksdb/options.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/write_batch.h"
#include "storage/db_options.h"

namespace dedup {
namespace {

using Model = std::map<std::string, std::string>;  // bytewise order

// A fresh directory under the test temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() : path_(::testing::TempDir() + "slot_memtable_test.XXXXXX") {
    EXPECT_NE(mkdtemp(path_.data()), nullptr);
  }
  ~TempDir() { std::filesystem::remove_all(path_, ignored_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::error_code ignored_;
};

// Counts flushes, to show a test really flushed (or really did not), and
// memtables sealed (made immutable, to be flushed).
class FlushCounter : public rocksdb::EventListener {
 public:
  void OnFlushCompleted(rocksdb::DB*, const rocksdb::FlushJobInfo&) override {
    flushes.fetch_add(1);
  }
  void OnMemTableSealed(const rocksdb::MemTableInfo&) override {
    sealed.fetch_add(1);
  }
  std::atomic<int> flushes{0};
  std::atomic<int> sealed{0};
};

std::string Be16(uint32_t v) {
  return {static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string Be32(uint32_t v) { return Be16(v >> 16) + Be16(v); }

std::string Show(const rocksdb::Slice& s) {
  return "\"" + absl::CHexEscape(absl::string_view(s.data(), s.size())) + "\"";
}

// The slot memtable with the options production puts around it
// (storage/db_options.cc): a 2-byte prefix extractor and non-concurrent
// memtable writes. Default options have no memtable bloom filter, so every
// Get of an absent key reaches the memtable's own search.
rocksdb::Options SlotOptions(rocksdb::Options options = rocksdb::Options()) {
  options.create_if_missing = true;
  const char* reason = nullptr;
  options.memtable_factory.reset(NewSlotMemTableRepFactory(&reason));
  // A fallback would silently test RocksDB's hash skiplist instead.
  EXPECT_EQ(reason, nullptr) << reason;
  options.allow_concurrent_memtable_write = false;
  options.prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(2));
  return options;
}

std::unique_ptr<rocksdb::DB> Open(const rocksdb::Options& options,
                                  const std::string& path) {
  rocksdb::DB* db = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(options, path, &db);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return std::unique_ptr<rocksdb::DB>(db);
}

rocksdb::ReadOptions ScanOptions(const rocksdb::Snapshot* snapshot) {
  rocksdb::ReadOptions options;
  options.total_order_seek = true;  // else scans stay within one prefix
  options.snapshot = snapshot;
  return options;
}

// Random writes mirrored into a model, over keys of every shape the memtable
// must order: empty and 1-byte keys (bucketed by their first byte, sorting
// before that bucket's longer keys), slots 0x0000 and 0xFFFF, a deep bucket
// of over a thousand versions of 3 metadata keys (rewritten per log entry
// in production), a bucket of many keys, and keys over many slots, with
// 0x00 and 0xFF bytes where a signed comparison or a terminator would break.
class Workload {
 public:
  Workload(uint64_t seed, size_t max_value_bytes)
      : rng_(seed), max_value_bytes_(max_value_bytes) {}

  // Applies `ops` writes to `db` and the model, in batches of 1-4 (a batch
  // may write one key twice: the later write has the higher sequence).
  void Run(rocksdb::DB* db, int ops) {
    while (ops > 0) {
      rocksdb::WriteBatch batch;
      for (int n = 1 + Uniform(4); n > 0 && ops > 0; --n, --ops) {
        const int r = Uniform(100);
        if (r < 25) {
          Put(&batch, Be16(0xFFFF) + "meta/" + std::to_string(Uniform(3)));
        } else if (r < 55 || keys_.empty()) {
          Put(&batch, NewKey());
        } else if (r < 80) {
          Put(&batch, keys_[Uniform(keys_.size())]);
        } else {
          const std::string key = keys_[Uniform(keys_.size())];
          ASSERT_TRUE(batch.Delete(key).ok());
          model_.erase(key);
        }
      }
      const rocksdb::Status s = db->Write(rocksdb::WriteOptions(), &batch);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }

  std::string NewKey() {
    const int shape = Uniform(8);
    if (shape == 0) return Bytes(2);  // shorter than or exactly a slot
    if (shape == 1) return Be16(0x1234) + Be16(Uniform(1500));  // 1500 keys
    // Slot 0x0500 holds the keys that follow the 1-byte key "\x05".
    static constexpr uint32_t kSlots[] = {0x0000, 0x0500, 0xFFFF};
    if (shape < 5) return Be16(kSlots[shape - 2]) + Bytes(10);
    return Be16(Uniform(1 << 16)) + Bytes(10);
  }

  int Uniform(size_t n) { return static_cast<int>(rng_() % n); }
  const Model& model() const { return model_; }
  // Every key ever written, deleted or not: the keys to Get.
  const std::vector<std::string>& keys() const { return keys_; }

 private:
  // 0 to `max` bytes, biased to the ends of the order and to the 1-byte
  // keys' first bytes.
  std::string Bytes(int max) {
    static constexpr char kSpecial[] = {'\x00', '\xFF', '\x05', '\x04'};
    std::string s;
    for (int n = Uniform(max + 1); n > 0; --n) {
      const int r = Uniform(8);
      s += r < 4 ? kSpecial[r] : static_cast<char>(rng_());
    }
    return s;
  }
  void Put(rocksdb::WriteBatch* batch, const std::string& key) {
    std::string value = "v" + std::to_string(++writes_) + ".";
    value.resize(value.size() + Uniform(max_value_bytes_ + 1), 'x');
    ASSERT_TRUE(batch->Put(key, value).ok());
    model_[key] = value;
    if (known_.insert(key).second) keys_.push_back(key);
  }

  std::mt19937_64 rng_;
  const size_t max_value_bytes_;
  int64_t writes_ = 0;
  Model model_;
  std::set<std::string> known_;
  std::vector<std::string> keys_;
};

// What an iterator shows, and what the model says it should show.
std::string Describe(const rocksdb::Iterator& it) {
  if (!it.status().ok()) return it.status().ToString();
  return it.Valid() ? Show(it.key()) + "=" + it.value().ToString() : "the end";
}
std::string Describe(const Model& model, Model::const_iterator pos) {
  return pos == model.end() ? "the end" : Show(pos->first) + "=" + pos->second;
}

// The model's key before `pos`; end() (not valid) before the first.
Model::const_iterator Before(const Model& model, Model::const_iterator pos) {
  return pos == model.begin() ? model.end() : std::prev(pos);
}

// Seek targets: before the first key, after the last, existing keys, just
// past them, the start and end of their buckets, and likely-empty buckets.
std::vector<std::string> SeekTargets(const std::vector<std::string>& keys,
                                     std::mt19937_64& rng) {
  std::vector<std::string> targets = {"", std::string(1, '\x05'),
                                      std::string(16, '\xff')};
  for (int i = 0; i < 200 && !keys.empty(); ++i) {
    const std::string& key = keys[rng() % keys.size()];
    const std::string slot = key.substr(0, 2);
    const std::string choices[] = {key, key + '\0', slot,
                                   slot + std::string(4, '\xff'),
                                   Be16(static_cast<uint32_t>(rng()))};
    targets.push_back(choices[i % 5]);
  }
  return targets;
}

// Fails (fatally, for ASSERT_NO_FATAL_FAILURE) at the first difference
// between what `db` shows at `snapshot` (null: now) and `model`.
void ExpectMatches(rocksdb::DB* db, const Model& model,
                   const std::vector<std::string>& probes,
                   const rocksdb::Snapshot* snapshot, uint64_t seed) {
  rocksdb::ReadOptions get_options;
  get_options.snapshot = snapshot;
  for (const std::string& key : probes) {
    std::string got;
    const rocksdb::Status s = db->Get(get_options, key, &got);
    const auto want = model.find(key);
    ASSERT_EQ(s.ok() ? got : s.ToString(),
              want == model.end() ? "NotFound: " : want->second)
        << "Get " << Show(key);
  }
  const rocksdb::ReadOptions scan = ScanOptions(snapshot);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(scan));
  // Full scans both ways cross every bucket boundary.
  auto pos = model.begin();
  for (it->SeekToFirst(); pos != model.end(); it->Next(), ++pos) {
    ASSERT_EQ(Describe(*it), Describe(model, pos)) << "forward scan";
  }
  ASSERT_EQ(Describe(*it), Describe(model, pos)) << "forward scan";
  auto rpos = model.rbegin();
  for (it->SeekToLast(); rpos != model.rend(); it->Prev(), ++rpos) {
    ASSERT_EQ(Describe(*it), Describe(model, std::prev(rpos.base())))
        << "backward scan";
  }
  ASSERT_EQ(Describe(*it), Describe(model, model.end())) << "backward scan";

  // Seeks, then a random walk that switches direction (which makes RocksDB
  // re-seek the memtable's iterator).
  std::mt19937_64 rng(seed);
  for (const std::string& target : SeekTargets(probes, rng)) {
    for (const bool for_prev : {false, true}) {
      // Seek: the first key >= target; SeekForPrev: the last key <= target.
      auto pos = for_prev ? Before(model, model.upper_bound(target))
                          : model.lower_bound(target);
      for_prev ? it->SeekForPrev(target) : it->Seek(target);
      std::string trace =
          (for_prev ? "SeekForPrev(" : "Seek(") + Show(target) + ")";
      ASSERT_EQ(Describe(*it), Describe(model, pos)) << trace;
      for (int step = 0; step < 8 && pos != model.end(); ++step) {
        const bool next = rng() % 2 == 0;
        next ? it->Next() : it->Prev();
        pos = next ? std::next(pos) : Before(model, pos);
        trace += next ? ".Next()" : ".Prev()";
        ASSERT_EQ(Describe(*it), Describe(model, pos)) << trace;
      }
    }
  }
}

// The 1-byte key "\x05" shares bucket 0x0500 with "\x05\x00..." keys and must
// come first in it (and the empty key first in bucket 0); a flush of keys
// out of order fails with a corruption error.
TEST(SlotMemTableTest, ShortKeysSortBytewiseAmongLongerKeys) {
  // Every key of 0-3 bytes over {0x00, 0x04, 0x05, 0xFF}: "\x05" before
  // "\x05\x00", "\x04\xff\xff" before "\x05", "\xff\xff" before
  // "\xff\xff\x00", and so on.
  std::vector<std::string> keys = {""};
  for (size_t i = 0; i < keys.size() && keys[i].size() < 3; ++i) {
    for (const char c : {'\x00', '\x04', '\x05', '\xff'}) {
      keys.push_back(keys[i] + c);
    }
  }
  std::mt19937_64 rng(7);
  std::shuffle(keys.begin(), keys.end(), rng);
  TempDir dir;
  std::unique_ptr<rocksdb::DB> db = Open(SlotOptions(), dir.path());
  ASSERT_NE(db, nullptr);
  Model model;
  for (const std::string& key : keys) {
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, "old").ok());
    model[key] = "v" + Show(key);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, model[key]).ok());
  }
  ASSERT_NO_FATAL_FAILURE(ExpectMatches(db.get(), model, keys, nullptr, 1));
  const rocksdb::Status s = db->Flush(rocksdb::FlushOptions());
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectMatches(db.get(), model, keys, nullptr, 2));
}

// Everything stays in one memtable (64 MiB buffer, no flush), so every read
// is answered by the slot memtable alone. A snapshot taken midway must keep
// seeing the model of its time.
TEST(SlotMemTableTest, RandomWritesMatchAModelWithinOneMemtable) {
  for (const uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    TempDir dir;
    auto counter = std::make_shared<FlushCounter>();
    rocksdb::Options options = SlotOptions();
    options.write_buffer_size = 64 << 20;
    options.listeners.push_back(counter);
    std::unique_ptr<rocksdb::DB> db = Open(options, dir.path());
    ASSERT_NE(db, nullptr);
    Workload work(seed, /*max_value_bytes=*/16);
    ASSERT_NO_FATAL_FAILURE(work.Run(db.get(), 1500));
    const rocksdb::Snapshot* snapshot = db->GetSnapshot();
    const Model at_snapshot = work.model();
    ASSERT_NO_FATAL_FAILURE(
        ExpectMatches(db.get(), work.model(), work.keys(), nullptr, seed));
    ASSERT_NO_FATAL_FAILURE(work.Run(db.get(), 3000));
    ASSERT_NO_FATAL_FAILURE(
        ExpectMatches(db.get(), work.model(), work.keys(), nullptr, seed + 10));
    ASSERT_NO_FATAL_FAILURE(
        ExpectMatches(db.get(), at_snapshot, work.keys(), snapshot, seed + 20));
    db->ReleaseSnapshot(snapshot);
    EXPECT_EQ(counter->flushes.load(), 0);
  }
}

// Many versions of one key in a memtable: each snapshot sees its version
// (or its absence, after a delete) through Get and iterators, with
// neighbours in the same and adjacent buckets to step over.
TEST(SlotMemTableTest, SnapshotsSeeOlderVersionsOfAKey) {
  TempDir dir;
  std::unique_ptr<rocksdb::DB> db = Open(SlotOptions(), dir.path());
  ASSERT_NE(db, nullptr);
  const std::string key = Be16(0x0101) + "k";
  Model model = {{Be16(0x0100) + "z", "a"},
                 {Be16(0x0101), "b"},
                 {Be16(0x0101) + "l", "c"},
                 {Be16(0x0102), "d"}};
  std::vector<std::string> keys = {key};
  for (const auto& [k, v] : model) {
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), k, v).ok());
    keys.push_back(k);
  }
  std::vector<std::pair<const rocksdb::Snapshot*, Model>> snapshots;
  for (int version = 0; version < 2000; ++version) {
    if (version % 300 == 150) {
      ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), key).ok());
      model.erase(key);
    } else {
      const std::string value = "version " + std::to_string(version);
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, value).ok());
      model[key] = value;
    }
    if (version % 50 == 0) snapshots.emplace_back(db->GetSnapshot(), model);
  }
  for (const auto& [snapshot, at_snapshot] : snapshots) {
    ASSERT_NO_FATAL_FAILURE(
        ExpectMatches(db.get(), at_snapshot, keys, snapshot, 5));
    db->ReleaseSnapshot(snapshot);
  }
  ASSERT_NO_FATAL_FAILURE(ExpectMatches(db.get(), model, keys, nullptr, 6));
}

// With a small write buffer the memtable is flushed many times while writing.
// Not below 1 MiB: the bucket index alone takes 520 KiB of a memtable's arena,
// and at 512 KiB or less a new memtable is full at birth, which RocksDB's
// assertions (on in Debian's build) abort on when the database opens.
// A flush writes the memtable's iteration order into an SST: out of order is
// a corruption error (check_flush_compaction_key_order), a lost key fails
// flush_verify_memtable_count or the model. Reopening replays the WAL
// through a memtable again. Production options otherwise.
TEST(SlotMemTableTest, FlushesAndReopensKeepEveryKeyInOrder) {
  TempDir dir;
  auto counter = std::make_shared<FlushCounter>();
  RecordDbTuning tuning;
  tuning.memory_budget_bytes = 16 << 20;
  auto options = [&] {
    rocksdb::Options o = SlotOptions(RecordDbOptions(tuning));
    o.write_buffer_size = 1 << 20;
    o.paranoid_file_checks = true;  // reads every new SST back
    o.listeners.push_back(counter);
    return o;
  };
  std::unique_ptr<rocksdb::DB> db = Open(options(), dir.path());
  ASSERT_NE(db, nullptr);
  Workload work(11, /*max_value_bytes=*/2000);
  ASSERT_NO_FATAL_FAILURE(work.Run(db.get(), 3000));
  const rocksdb::Snapshot* snapshot = db->GetSnapshot();
  const Model at_snapshot = work.model();
  ASSERT_NO_FATAL_FAILURE(work.Run(db.get(), 3000));
  // Memtables filled while writing, each flushed alone or with the one
  // sealed after it: when writes outpace the flush thread (a busy machine),
  // one flush job takes every immutable memtable, at most
  // max_write_buffer_number (2) of them, and up to 2 may still wait here.
  // (Counting flush jobs alone made this test fail under load: 7-9 of 10.)
  const int sealed = counter->sealed.load();
  EXPECT_GE(sealed, 10);
  EXPECT_EQ(db->GetOptions().max_write_buffer_number, 2);
  EXPECT_GE(counter->flushes.load(), (sealed - 2) / 2);
  uint64_t background_errors = 1;
  EXPECT_TRUE(
      db->GetIntProperty("rocksdb.background-errors", &background_errors));
  EXPECT_EQ(background_errors, 0u);
  ASSERT_NO_FATAL_FAILURE(
      ExpectMatches(db.get(), work.model(), work.keys(), nullptr, 12));
  ASSERT_NO_FATAL_FAILURE(
      ExpectMatches(db.get(), at_snapshot, work.keys(), snapshot, 13));
  db->ReleaseSnapshot(snapshot);
  db.reset();
  db = Open(options(), dir.path());
  ASSERT_NE(db, nullptr);
  ASSERT_NO_FATAL_FAILURE(
      ExpectMatches(db.get(), work.model(), work.keys(), nullptr, 14));
}

// Key i of the concurrency test: over 4096 slots, and at a random place in
// its slot (inserting in key order would only ever append to a bucket's
// end), then i itself.
std::string ConcurrentKey(uint32_t i) {
  return Be16((i * 2654435761u) >> 20) + Be32(i * 0x9E3779B1u) + Be32(i);
}

// One writer, concurrent readers (the memtable's contract): a Get of a
// published key finds it, and a scan sees strictly increasing keys including
// every key published before the iterator was created, while new buckets
// appear and existing ones grow under it.
TEST(SlotMemTableTest, ReadersSeePublishedKeysWhileOneThreadWrites) {
  TempDir dir;
  rocksdb::Options options = SlotOptions();
  options.write_buffer_size = 64 << 20;  // one memtable throughout
  std::unique_ptr<rocksdb::DB> db = Open(options, dir.path());
  ASSERT_NE(db, nullptr);
  constexpr uint32_t kKeys = 60000;
  std::atomic<uint32_t> published{0};
  std::atomic<bool> done{false};
  std::thread writer([&] {
    rocksdb::WriteOptions write;
    write.disableWAL = true;
    for (uint32_t i = 0; i < kKeys; ++i) {
      const rocksdb::Status s =
          db->Put(write, ConcurrentKey(i), std::to_string(i));
      if (!s.ok()) {
        ADD_FAILURE() << s.ToString();
        break;
      }
      published.store(i + 1, std::memory_order_release);
    }
    done.store(true);  // even after a failure: the readers stop on it
  });
  auto getter = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (bool last = false; !last;) {
      last = done.load();
      const uint32_t n = published.load(std::memory_order_acquire);
      for (int j = 0; j < 1000 && n > 0; ++j) {
        const uint32_t i = rng() % n;
        std::string value;
        const rocksdb::Status s =
            db->Get(rocksdb::ReadOptions(), ConcurrentKey(i), &value);
        ASSERT_EQ(s.ok() ? value : s.ToString(), std::to_string(i))
            << "key " << i << " of " << n << " published";
        // Maybe being inserted right now: either absent or right.
        const uint32_t next = n + rng() % 64;
        if (db->Get(rocksdb::ReadOptions(), ConcurrentKey(next), &value).ok()) {
          ASSERT_EQ(value, std::to_string(next));
        }
      }
    }
  };
  auto scanner = [&] {
    for (bool last = false; !last;) {
      last = done.load();
      const uint32_t n = published.load(std::memory_order_acquire);
      std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ScanOptions({})));
      std::vector<bool> seen(kKeys);
      std::string previous;
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        const std::string key = it->key().ToString();
        ASSERT_EQ(key.size(), 10u) << Show(key);
        ASSERT_TRUE(previous.empty() || previous < key)
            << Show(previous) << " then " << Show(key);
        uint32_t i = 0;  // the key's last 4 bytes
        for (int b = 6; b < 10; ++b) i = i << 8 | static_cast<uint8_t>(key[b]);
        ASSERT_LT(i, kKeys);
        ASSERT_EQ(key, ConcurrentKey(i));
        seen[i] = true;
        previous = key;
      }
      ASSERT_TRUE(it->status().ok()) << it->status().ToString();
      for (uint32_t i = 0; i < n; ++i) {
        ASSERT_TRUE(seen[i]) << "key " << i << " published before the scan";
      }
    }
  };
  std::thread readers[] = {std::thread(getter, 1), std::thread(getter, 2),
                           std::thread(scanner)};
  writer.join();
  for (std::thread& reader : readers) reader.join();
}

// Production's options (storage/db_options.cc) use this memtable, with the
// settings its contract requires.
TEST(SlotMemTableTest, ProductionOptionsUseIt) {
  const rocksdb::Options options = RecordDbOptions(RecordDbTuning());
  const char* reason = nullptr;
  std::unique_ptr<rocksdb::MemTableRepFactory> slot(
      NewSlotMemTableRepFactory(&reason));
  ASSERT_EQ(reason, nullptr) << reason;
  ASSERT_NE(options.memtable_factory, nullptr);
  EXPECT_STREQ(options.memtable_factory->Name(), slot->Name());
  EXPECT_STREQ(slot->Name(), "DedupSlotMemTableRepFactory");
  EXPECT_FALSE(options.allow_concurrent_memtable_write);
  EXPECT_FALSE(options.inplace_update_support);
  ASSERT_NE(options.prefix_extractor, nullptr);
  EXPECT_EQ(options.prefix_extractor->Transform("slot").ToString(), "sl");
}

}  // namespace
}  // namespace dedup
