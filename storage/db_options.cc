#include "storage/db_options.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/log.h"
#include "rocksdb/cache.h"
#include "rocksdb/env.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/memtablerep.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/table.h"
#include "rocksdb/write_buffer_manager.h"
#include "storage/durable_dir.h"
#include "storage/resource_error_fs.h"
#include "storage/slot_memtable.h"

namespace dedup {
namespace {

// Every storage key starts with its 2-byte slot (metadata with 0xFFFF).
constexpr size_t kSlotPrefixBytes = 2;

// The slot memtable (slot_memtable.h), made once per process; says once on
// stderr if this RocksDB build made it fall back to RocksDB's hash memtable.
std::shared_ptr<rocksdb::MemTableRepFactory> SlotMemtableFactory() {
  static const auto* const kFactory = [] {
    const char* fallback = nullptr;
    auto* factory = new std::shared_ptr<rocksdb::MemTableRepFactory>(
        NewSlotMemTableRepFactory(&fallback));
    if (fallback != nullptr) {
      LogWarning("slot memtable unavailable (", fallback,
                 "); using RocksDB's hash skiplist memtable");
    }
    return factory;
  }();
  return *kFactory;
}

// RocksDB's warnings and errors go to dedupd's log (component "rocksdb"),
// beside dedupd's own lines, not to a LOG file in the data dir: on a full
// disk the LOG file is the first thing to fail, and the next line RocksDB
// writes to a failed file trips an assertion in Debian's librocksdb (built
// with assertions on), aborting the process. And they are the lines an
// operator needs to see.
class StderrLogger : public rocksdb::Logger {
 public:
  StderrLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}

  void Logv(const char* format, va_list ap) override {
    Write(LogLevel::kInfo, format, ap);
  }
  // RocksDB's errors are ours at error level, so that --log_level=error
  // still shows them.
  void Logv(const rocksdb::InfoLogLevel level, const char* format,
            va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    Write(level >= rocksdb::InfoLogLevel::ERROR_LEVEL  ? LogLevel::kError
          : level >= rocksdb::InfoLogLevel::WARN_LEVEL ? LogLevel::kWarning
          : level >= rocksdb::InfoLogLevel::INFO_LEVEL ? LogLevel::kInfo
                                                       : LogLevel::kDebug,
          format, ap);
  }

 private:
  static void Write(LogLevel level, const char* format, va_list ap) {
    char line[1024];
    const int n = std::vsnprintf(line, sizeof(line), format, ap);
    if (n < 0) return;
    Log(level, "rocksdb", absl::StripTrailingAsciiWhitespace(line));
  }
};

// As much as RocksDB preallocates for a MANIFEST by default.
constexpr size_t kWalPreallocationBytes = 4 << 20;

}  // namespace

rocksdb::Options RecordDbOptions(const RecordDbTuning& tuning) {
  rocksdb::Options db;
  db.create_if_missing = true;
  db.env = ResourceErrorRetryableEnv();
  db.compaction_filter = tuning.compaction_filter;
  db.periodic_compaction_seconds = tuning.periodic_compaction_s;
  db.max_background_jobs = 2;
  db.bytes_per_sync = 1 << 20;
  db.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  db.info_log = std::make_shared<StderrLogger>();
  db.manual_wal_flush = tuning.manual_wal_flush;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(tuning.memory_budget_bytes);
  // Memtables are charged to the block cache, so one budget bounds both.
  const size_t memtable_budget = tuning.memory_budget_bytes / 2;
  db.write_buffer_manager = std::make_shared<rocksdb::WriteBufferManager>(
      memtable_budget, table.block_cache);
  db.write_buffer_size = std::min<size_t>(memtable_budget / 2, 64 << 20);
  // Caps the WAL's preallocation block (RocksDB: 1.1 x write_buffer_size,
  // at most db_write_buffer_size; with a write_buffer_manager this bounds
  // nothing else). A 35 MiB fallocate on a nearly full ext4 takes every free
  // block before failing, so the free-space check saw 0 bytes and small
  // writes (the event log key) failed while the WAL held a few bytes.
  db.db_write_buffer_size = kWalPreallocationBytes;
  // Point lookups and inserts are the whole workload, so the memtable is one
  // small skiplist per slot instead of one big skiplist, whose cache-missing
  // search was the top of a Begin's CPU profile (-20% server CPU per key
  // under BeginBatch); kept in slot order, so flushes need no sort
  // (slot_memtable.h). The price: writes to it are not concurrent.
  db.prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(kSlotPrefixBytes));
  db.memtable_factory = SlotMemtableFactory();
  db.allow_concurrent_memtable_write = false;
  // Most Begins are for new keys: a memtable bloom filter answers "absent"
  // without searching the memtable at all.
  db.memtable_whole_key_filtering = true;
  db.memtable_prefix_bloom_size_ratio = 0.1;
  // Index and filter blocks live in the bounded cache, so memory does not
  // grow with the number of records. They are partitioned into small blocks:
  // a whole-file filter of a large table (megabytes) is bigger than a cache
  // shard, so it never stayed cached and every lookup read and checksummed
  // it again (new-key Begins fell from 127k/s to 5k/s past ~2.5M records).
  table.cache_index_and_filter_blocks = true;
  table.cache_index_and_filter_blocks_with_high_priority = true;
  table.pin_top_level_index_and_filter = true;
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  table.index_type = rocksdb::BlockBasedTableOptions::kTwoLevelIndexSearch;
  table.partition_filters = true;
  table.metadata_block_size = 4096;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  db.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return db;
}

rocksdb::ReadOptions TotalOrderScan() {
  rocksdb::ReadOptions options;
  options.total_order_seek = true;
  options.fill_cache = false;
  options.readahead_size = 2 << 20;
  return options;
}

absl::StatusOr<std::unique_ptr<rocksdb::DB>> OpenRecordDb(
    const rocksdb::Options& options, const std::string& path) {
  if (options.create_if_missing) {
    // RocksDB 7.8 creates a missing directory itself, but first logs a
    // failed read of it as an error, and never syncs its parent.
    if (absl::Status s = CreateDirectoriesDurably(path); !s.ok()) return s;
  }
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &db);
  if (s.ok()) return std::unique_ptr<rocksdb::DB>(db);
  // RocksDB reports a held LOCK file as an IO error mentioning the lock.
  if (absl::StrContains(s.ToString(), "lock")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data dir ", path,
        " is locked by another process (is another dedupd running on it?): ",
        s.ToString()));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot open data dir ", path, ": ", s.ToString(),
      " (if files in it are damaged or missing: restore it from a backup or a "
      "replica, or move it away to start empty)"));
}

}  // namespace dedup
