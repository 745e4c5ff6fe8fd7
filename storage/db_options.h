// RocksDB options for a database of records (storage_key.h layout), shared by
// the single-node store and the replicated state machine so both get the same
// tuning: one memory budget, a per-slot hash memtable, partitioned filters.
#ifndef DEDUP_STORAGE_DB_OPTIONS_H_
#define DEDUP_STORAGE_DB_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rocksdb/compaction_filter.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"

namespace dedup {

struct RecordDbTuning {
  // Block cache plus memtables (charged to the same cache, half at most).
  size_t memory_budget_bytes = 128 << 20;
  // Every SST file is rewritten (and so filtered) at least this often.
  uint64_t periodic_compaction_s = 6 * 3600;
  // Not owned; must outlive the database. Null for none.
  const rocksdb::CompactionFilter* compaction_filter = nullptr;
  // Writes append to RocksDB's WAL buffer only; the owner flushes it.
  bool manual_wal_flush = false;
};

[[nodiscard]] rocksdb::Options RecordDbOptions(const RecordDbTuning& tuning);

// Opens the database at `path` with `options`. FailedPreconditionError when
// another process holds its lock (another dedupd on the same data dir),
// InvalidArgumentError for any other failure; both name the path.
[[nodiscard]] absl::StatusOr<std::unique_ptr<rocksdb::DB>> OpenRecordDb(
    const rocksdb::Options& options, const std::string& path);

// Options for a scan of the whole key space: with a prefix extractor,
// iterators otherwise stay within one prefix. Scans read every block once,
// so they read ahead and leave the block cache to point lookups.
[[nodiscard]] rocksdb::ReadOptions TotalOrderScan();

}  // namespace dedup

#endif  // DEDUP_STORAGE_DB_OPTIONS_H_
