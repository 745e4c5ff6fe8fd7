// The leases of a database's in-flight records, kept in memory so lease
// statistics (StoreStats: in flight, lapsed, oldest lapsed) need no scan per
// scrape. Used by the replicated state; the single-node shards keep theirs
// inline (Shard::inflight_).
//
// Bounded: past `max_tracked` keys new leases are not tracked and the
// figures say they undercount. After an open, a scan of the database seeds
// the tracker while writes go on; a key written during the scan keeps what
// the write said (the scan may have read it before the write).
//
// Thread safety: every method may be called from any thread.
#ifndef DEDUP_STORAGE_LEASE_TRACKER_H_
#define DEDUP_STORAGE_LEASE_TRACKER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/db.h"
#include "storage/store.h"

namespace dedup {

class LeaseTracker {
 public:
  explicit LeaseTracker(size_t max_tracked) : max_tracked_(max_tracked) {}

  // One applied write: a record key and its new encoded value, or nullptr
  // when it was deleted. `now_ms` (replicated time) paces the sweep of
  // expired entries.
  using Write = std::pair<absl::string_view, const std::string*>;
  void OnWrites(const std::vector<Write>& writes, int64_t now_ms);

  // Forgets everything and starts a seeding scan (the figures undercount
  // until FinishSeeding(true)).
  void BeginSeeding();
  // A record the scan found (its encoded value).
  void Seed(absl::string_view skey, absl::string_view value, int64_t now_ms);
  // `complete`: the scan read every record.
  void FinishSeeding(bool complete);

  // Fills the lease fields of `stats` as of `now_ms`.
  void AddStats(int64_t now_ms, StoreStats& stats) const;

 private:
  struct Lease {
    int64_t lease_until_ms = 0;
    int64_t expire_at_ms = 0;
  };
  static uint64_t IdOf(absl::string_view skey);
  void TrackLocked(uint64_t id, Lease lease) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_tracked_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Lease> leases_ ABSL_GUARDED_BY(mu_);
  bool saturated_ ABSL_GUARDED_BY(mu_) = false;
  bool seeding_ ABSL_GUARDED_BY(mu_) = false;
  bool seed_incomplete_ ABSL_GUARDED_BY(mu_) = true;  // nothing scanned yet
  absl::flat_hash_set<uint64_t> written_while_seeding_ ABSL_GUARDED_BY(mu_);
  int64_t next_sweep_ms_ ABSL_GUARDED_BY(mu_) = 0;
};

// The seeding scan: hands every record of `db` (key and stored value) to
// `seed`, in key order, checking `stop` every few thousand records. True when
// it read them all (not stopped, no read error).
[[nodiscard]] bool ScanRecordsForLeases(
    rocksdb::DB* db, const std::atomic<bool>& stop,
    absl::FunctionRef<void(absl::string_view skey, absl::string_view value)>
        seed);
// The same over `it`, an iterator from NewRecordScan taken earlier: its view
// is fixed when it is created (namespace_bytes.h counts from that moment).
[[nodiscard]] std::unique_ptr<rocksdb::Iterator> NewRecordScan(rocksdb::DB* db);
[[nodiscard]] bool ScanRecordsForLeases(
    std::unique_ptr<rocksdb::Iterator> it, const std::atomic<bool>& stop,
    absl::FunctionRef<void(absl::string_view skey, absl::string_view value)>
        seed);

}  // namespace dedup

#endif  // DEDUP_STORAGE_LEASE_TRACKER_H_
