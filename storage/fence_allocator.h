// Issues node-wide, strictly increasing fences that survive restarts.
//
// Fences are handed out from a block reserved durably in RocksDB: before the
// first fence of a block is returned, the block's upper end is synced to the
// WAL. After a restart allocation resumes above the last reservation, so a
// fence is never issued twice even if the process crashed mid-block (fences
// skip at most one block per restart).
#ifndef DEDUP_STORAGE_FENCE_ALLOCATOR_H_
#define DEDUP_STORAGE_FENCE_ALLOCATOR_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/db.h"

namespace dedup {

// Thread-safe. Does not own `db`, which must outlive it.
class FenceAllocator {
 public:
  static constexpr uint64_t kBlockSize = 1 << 16;

  // Reads the last reservation from `db` and reserves a fresh block.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<FenceAllocator>> Open(
      rocksdb::DB* db);

  // Returns a fence above every fence returned before, by this process or an
  // earlier one on the same data. Blocks on a synced write once per block.
  [[nodiscard]] absl::StatusOr<uint64_t> Next();
  // Like Next, but never blocks on I/O: nullopt when the block is used up
  // (then Next reserves the next one).
  [[nodiscard]] std::optional<uint64_t> NextWithoutIo();

 private:
  FenceAllocator(rocksdb::DB* db, uint64_t last_issued)
      : db_(db), last_issued_(last_issued), reserved_up_to_(last_issued) {}

  absl::Status ReserveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  rocksdb::DB* const db_;
  absl::Mutex mu_;
  uint64_t last_issued_ ABSL_GUARDED_BY(mu_);
  uint64_t reserved_up_to_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup

#endif  // DEDUP_STORAGE_FENCE_ALLOCATOR_H_
