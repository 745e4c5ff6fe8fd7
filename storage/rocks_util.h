// RocksDB helpers both stores share: the single-node RocksStore (store.cc)
// and the replicated state (replicated_state.cc).
#ifndef DEDUP_STORAGE_ROCKS_UTIL_H_
#define DEDUP_STORAGE_ROCKS_UTIL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rocksdb/db.h"
#include "rocksdb/status.h"

namespace dedup {

// OK for an OK status, else UNAVAILABLE "<what>: <RocksDB's message>": a
// storage failure is the server's trouble, never the caller's request.
[[nodiscard]] absl::Status FromRocks(const rocksdb::Status& s,
                                     absl::string_view what);

// Counts the record keys in `db`, expired or not, with one total-order scan
// from the first key to the metadata (which sorts after every record).
// O(records): for tests and tools. The caller keeps `db` open for the call;
// thread-safe as RocksDB's iterators are.
[[nodiscard]] absl::StatusOr<uint64_t> CountRecordsInDb(rocksdb::DB& db);

}  // namespace dedup

#endif  // DEDUP_STORAGE_ROCKS_UTIL_H_
