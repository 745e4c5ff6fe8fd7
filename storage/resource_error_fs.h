// RocksDB's file system with one change: running out of file descriptors
// (EMFILE, ENFILE) when a file is opened is reported as a retryable I/O
// error.
//
// Why: RocksDB 7.8 ranks a plain I/O error met by a flush as fatal (with
// paranoid_checks, the default): writes stop and DB::Resume() refuses to
// bring them back until the process restarts, so a burst of connections
// that used up the descriptor limit for a moment would leave every later
// write failing for good. A retryable error is ranked hard instead, which
// DB::Resume() recovers from once descriptors are free again (WriteHealth
// retries it). Nothing else changes: other errors keep their severity.
#ifndef DEDUP_STORAGE_RESOURCE_ERROR_FS_H_
#define DEDUP_STORAGE_RESOURCE_ERROR_FS_H_

#include "rocksdb/env.h"

namespace dedup {

// The process-wide Env for our databases: the default one, on the file
// system above. Never destroyed (databases may close during exit).
[[nodiscard]] rocksdb::Env* ResourceErrorRetryableEnv();

}  // namespace dedup

#endif  // DEDUP_STORAGE_RESOURCE_ERROR_FS_H_
