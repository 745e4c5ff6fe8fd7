// Bytes stored per namespace: the key and value bytes of every record as
// written to RocksDB, for the tenants file's `stored_bytes` limit.
//
// Kept exactly without a scan per read: every write the store makes changes
// its namespace's figure by (new size - old size), where the old size is what
// the write's own read found (every write is a read-modify-write); a delete
// subtracts the old size; a record the TTL compaction filter drops subtracts
// its size. The starting point is the scan the store already runs after an
// open (lease seeding, lease_tracker.h): it takes its iterator before anything
// else counts, so the scan's view plus every change counted since is the
// current state. Until the scan has finished the figures are incomplete and
// say so.
//
// Writers never share a lock: each writer thread (a storage shard, the apply
// loop, the compaction filter, the scan) has its own NamespaceBytes, and a
// read merges them (O(namespaces), meant for about once a second).
//
// Bounded: each NamespaceBytes tracks at most `max_namespaces` namespaces.
// Changes to a namespace it does not track once full are not kept, and the
// merged figures say `truncated` (those namespaces then undercount).
#ifndef DEDUP_STORAGE_NAMESPACE_BYTES_H_
#define DEDUP_STORAGE_NAMESPACE_BYTES_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace dedup {

// A snapshot of the bytes stored per namespace.
struct StoredBytes {
  // Namespaces holding bytes (> 0).
  absl::flat_hash_map<std::string, int64_t> by_namespace;
  // The scan after open has read every record: the figures are the state.
  // False while it runs, if it failed, or when the store does not count.
  bool complete = false;
  // Some namespaces were past the tracking bound: their figures undercount.
  bool truncated = false;
};

// What one record occupies: its storage key plus its stored value.
inline int64_t StoredRecordBytes(absl::string_view skey,
                                 absl::string_view value) {
  return static_cast<int64_t>(skey.size() + value.size());
}

// Changes to the bytes per namespace made by one writer. Thread-safe; its
// lock is shared only with readers merging it.
class NamespaceBytes {
 public:
  explicit NamespaceBytes(size_t max_namespaces)
      : max_namespaces_(max_namespaces) {}

  // Adds `delta` bytes to the namespace of record key `skey` (metadata keys
  // are ignored).
  void AddRecord(absl::string_view skey, int64_t delta)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Add(absl::string_view ns, int64_t delta) ABSL_LOCKS_EXCLUDED(mu_);
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);
  // Adds these changes to `out` (sums per namespace; sets truncated).
  void MergeInto(absl::flat_hash_map<std::string, int64_t>& out,
                 bool& truncated) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const size_t max_namespaces_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int64_t> bytes_ ABSL_GUARDED_BY(mu_);
  bool truncated_ ABSL_GUARDED_BY(mu_) = false;
};

// The counters of one database: one per writer plus the scan's.
class StoredBytesAccount {
 public:
  // `writers`: how many writer threads count (shards; 1 for the apply
  // loop). Starts incomplete.
  StoredBytesAccount(int writers, size_t max_namespaces);

  NamespaceBytes& writer(int i) { return *writers_[i]; }
  // Records dropped by the TTL compaction filter.
  NamespaceBytes& dropped() { return dropped_; }
  NamespaceBytes& scanned() { return scanned_; }

  // Forgets every figure and marks them incomplete: call when the scan's
  // iterator has just been taken and no writer runs (its view is the new
  // starting point).
  void BeginScan();
  // `complete`: the scan read every record.
  void FinishScan(bool complete) { complete_.store(complete); }

  [[nodiscard]] StoredBytes Snapshot() const;

 private:
  std::vector<std::unique_ptr<NamespaceBytes>> writers_;
  NamespaceBytes dropped_;
  NamespaceBytes scanned_;
  std::atomic<bool> complete_{false};
};

}  // namespace dedup

#endif  // DEDUP_STORAGE_NAMESPACE_BYTES_H_
