#include "storage/fence_allocator.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "storage/storage_key.h"

namespace dedup {

absl::StatusOr<std::unique_ptr<FenceAllocator>> FenceAllocator::Open(
    rocksdb::DB* db) {
  std::string value;
  rocksdb::Status s =
      db->Get(rocksdb::ReadOptions(), FenceReservationKey(), &value);
  uint64_t reserved = 0;
  if (s.ok()) {
    if (!absl::SimpleAtoi(value, &reserved)) {
      return absl::DataLossError(
          absl::StrCat("fence reservation is not a number: '", value, "'"));
    }
  } else if (!s.IsNotFound()) {
    return absl::InternalError(
        absl::StrCat("reading fence reservation: ", s.ToString()));
  }
  std::unique_ptr<FenceAllocator> allocator(new FenceAllocator(db, reserved));
  absl::MutexLock lock(&allocator->mu_);
  if (absl::Status st = allocator->ReserveLocked(); !st.ok()) return st;
  return allocator;
}

absl::StatusOr<uint64_t> FenceAllocator::Next() {
  absl::MutexLock lock(&mu_);
  if (last_issued_ >= reserved_up_to_) {
    if (absl::Status st = ReserveLocked(); !st.ok()) return st;
  }
  return ++last_issued_;
}

std::optional<uint64_t> FenceAllocator::NextWithoutIo() {
  absl::MutexLock lock(&mu_);
  if (last_issued_ >= reserved_up_to_) return std::nullopt;
  return ++last_issued_;
}

absl::Status FenceAllocator::ReserveLocked() {
  const uint64_t next_reservation = reserved_up_to_ + kBlockSize;
  rocksdb::WriteOptions options;
  // Synced whatever the durability mode: a fence reissued after a crash would
  // let two owners both believe they hold the same key.
  options.sync = true;
  rocksdb::Status s =
      db_->Put(options, FenceReservationKey(), absl::StrCat(next_reservation));
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("reserving fences: ", s.ToString()));
  }
  reserved_up_to_ = next_reservation;
  return absl::OkStatus();
}

}  // namespace dedup
