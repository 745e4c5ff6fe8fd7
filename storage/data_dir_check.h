// Opening the single-node store's database only when it is whole: a data
// dir that lost acknowledged writes or holds a damaged file is refused with
// a message naming the file and what to do, instead of starting silently
// with data missing.
//
// RocksDB alone would start in each of these cases: a WAL cut short or
// deleted (point-in-time recovery replays what is there: acknowledged
// writes vanish); CURRENT deleted (it creates a new, empty database beside
// the old files, and fences start from 1 again); a damaged data block (found
// only when read). And a damaged table footer is reported as a MANIFEST
// problem without naming the table.
//
// So, before the database is opened for writing:
// 1. A directory without CURRENT is new only if it holds no database file
//    (MANIFEST, table, WAL) and no durable marker; otherwise it is refused.
// 2. It is opened read-only (nothing on disk changes: a refused directory is
//    left exactly as it was found, for whoever repairs it), under its LOCK.
//    A failure naming no file gets the damaged table files named: each one
//    is opened and checked on its own.
// 3. The recovered state is compared with the durable marker
//    (durable_marker.h): its sequence number must be reached, and the WAL it
//    names must still hold its synced bytes, unless a flush made that WAL
//    obsolete.
// 4. Optionally every block of every table file is checked
//    (DB::VerifyChecksum, a full read of the tables: a million records here
//    are 49 MB of tables, checked in 0.1 s from a cold cache).
// A torn WAL tail after a crash is normal (the last, unsynced and so never
// acknowledged, write) and passes: the recovered state still reaches the
// marker.
#ifndef DEDUP_STORAGE_DATA_DIR_CHECK_H_
#define DEDUP_STORAGE_DATA_DIR_CHECK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "storage/durable_marker.h"

namespace dedup {

struct CheckedRecordDb {
  std::unique_ptr<rocksdb::DB> db;
  // The dir's marker, created if it had none, recording the state as
  // opened.
  std::unique_ptr<DurableMarker> marker;
};

// Opens the database at `path` with `options` (create_if_missing is
// decided here) after the checks above. Errors name the path (and the file
// at fault) and say what to do: FailedPreconditionError when another
// process holds the directory's lock, DataLossError when the directory is
// damaged or lost acknowledged writes, InvalidArgumentError otherwise.
[[nodiscard]] absl::StatusOr<CheckedRecordDb> OpenCheckedRecordDb(
    const rocksdb::Options& options, const std::string& path, bool verify_data);

}  // namespace dedup

#endif  // DEDUP_STORAGE_DATA_DIR_CHECK_H_
