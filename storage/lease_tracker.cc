#include "storage/lease_tracker.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/hash/hash.h"
#include "storage/db_options.h"
#include "storage/record.h"
#include "storage/storage_key.h"

namespace dedup {
namespace {

// Sweeping is rare: an expired entry only costs a skipped line in AddStats.
constexpr int64_t kSweepIntervalMs = 60'000;

}  // namespace

uint64_t LeaseTracker::IdOf(absl::string_view skey) {
  return absl::Hash<absl::string_view>{}(skey);
}

void LeaseTracker::TrackLocked(uint64_t id, Lease lease) {
  if (leases_.size() >= max_tracked_ && !leases_.contains(id)) {
    saturated_ = true;
    return;
  }
  leases_.insert_or_assign(id, lease);
}

void LeaseTracker::OnWrites(const std::vector<Write>& writes, int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  for (const auto& [skey, value] : writes) {
    const uint64_t id = IdOf(skey);
    if (seeding_) written_while_seeding_.insert(id);
    std::optional<LeaseHeader> header;
    if (value != nullptr) header = PeekLeaseHeader(*value);
    if (header.has_value() && header->state == RecordState::kInFlight) {
      TrackLocked(id, Lease{header->lease_until_ms, header->expire_at_ms});
    } else {
      leases_.erase(id);
    }
  }
  if (now_ms >= next_sweep_ms_) {
    next_sweep_ms_ = now_ms + kSweepIntervalMs;
    absl::erase_if(leases_, [now_ms](const auto& entry) {
      return now_ms >= entry.second.expire_at_ms;
    });
    if (leases_.size() < max_tracked_ / 2) saturated_ = false;
  }
}

void LeaseTracker::BeginSeeding() {
  absl::MutexLock lock(&mu_);
  leases_.clear();
  saturated_ = false;
  seeding_ = true;
  seed_incomplete_ = false;
  written_while_seeding_.clear();
}

void LeaseTracker::Seed(absl::string_view skey, absl::string_view value,
                        int64_t now_ms) {
  std::optional<LeaseHeader> header = PeekLeaseHeader(value);
  if (!header.has_value() || header->state != RecordState::kInFlight ||
      now_ms >= header->expire_at_ms) {
    return;
  }
  const uint64_t id = IdOf(skey);
  absl::MutexLock lock(&mu_);
  if (!seeding_ || written_while_seeding_.contains(id)) return;
  TrackLocked(id, Lease{header->lease_until_ms, header->expire_at_ms});
}

void LeaseTracker::FinishSeeding(bool complete) {
  absl::MutexLock lock(&mu_);
  seeding_ = false;
  seed_incomplete_ = !complete;
  absl::flat_hash_set<uint64_t>().swap(written_while_seeding_);
}

void LeaseTracker::AddStats(int64_t now_ms, StoreStats& stats) const {
  absl::MutexLock lock(&mu_);
  stats.inflight_tracking_saturated |=
      saturated_ || seeding_ || seed_incomplete_;
  for (const auto& [id, lease] : leases_) {
    if (now_ms >= lease.expire_at_ms) continue;  // expired: absent
    if (now_ms < lease.lease_until_ms) {
      ++stats.inflight_leases;
    } else {
      ++stats.lapsed_leases;
      stats.oldest_lapsed_lease_ms =
          std::max(stats.oldest_lapsed_lease_ms, now_ms - lease.lease_until_ms);
    }
  }
}

bool ScanRecordsForLeases(
    rocksdb::DB* db, const std::atomic<bool>& stop,
    absl::FunctionRef<void(absl::string_view skey, absl::string_view value)>
        seed) {
  return ScanRecordsForLeases(
      std::unique_ptr<rocksdb::Iterator>(db->NewIterator(TotalOrderScan())),
      stop, seed);
}

std::unique_ptr<rocksdb::Iterator> NewRecordScan(rocksdb::DB* db) {
  return std::unique_ptr<rocksdb::Iterator>(db->NewIterator(TotalOrderScan()));
}

bool ScanRecordsForLeases(
    std::unique_ptr<rocksdb::Iterator> it, const std::atomic<bool>& stop,
    absl::FunctionRef<void(absl::string_view skey, absl::string_view value)>
        seed) {
  uint64_t scanned = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (++scanned % 4096 == 0 && stop.load()) return false;
    const absl::string_view skey(it->key().data(), it->key().size());
    if (!IsRecordKey(skey)) break;  // metadata sorts after every record
    seed(skey, absl::string_view(it->value().data(), it->value().size()));
  }
  return it->status().ok();
}

}  // namespace dedup
