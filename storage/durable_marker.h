// A small file in the data dir recording how far the database was durable:
// the highest RocksDB sequence number whose WAL sync succeeded (so every
// write acknowledged under durability sync is at or below it), and the WAL
// file that sync covered with its size then.
//
// At the next start, a database that recovers to a lower sequence number, or
// whose recorded WAL is shorter than the synced size or missing while still
// needed, has lost acknowledged writes: RocksDB's point-in-time recovery
// would have started silently without them (a WAL cut short or deleted).
// The marker also says that the directory has held a database, so a missing
// CURRENT is never mistaken for a fresh directory.
//
// Updated after every successful sync with one pwrite of a fixed-size block
// and no fsync: a lost update after a machine crash only leaves an older,
// lower mark, which never refuses a good directory. It is fsynced when it is
// created and at a clean close.
//
// Thread safety: Update and Sync may be called from any thread.
#ifndef DEDUP_STORAGE_DURABLE_MARKER_H_
#define DEDUP_STORAGE_DURABLE_MARKER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace dedup {

// File name of the marker inside a data dir. RocksDB ignores files whose
// names it does not know.
inline constexpr char kDurableMarkerName[] = "DEDUP-DURABLE";

struct DurableMark {
  uint64_t sequence = 0;    // every write at or below it is durable
  uint64_t wal_number = 0;  // the WAL that sync covered (0: none known)
  uint64_t wal_bytes = 0;   // bytes of that WAL known to be synced
};

class DurableMarker {
 public:
  // nullopt when `dir` has no marker; DataLossError naming the file when it
  // exists but cannot be read or parsed.
  [[nodiscard]] static absl::StatusOr<std::optional<DurableMark>> Read(
      const std::string& dir);

  // Opens (creating if needed) the marker of `dir` and durably writes
  // `initial` to it.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DurableMarker>> Create(
      const std::string& dir, const DurableMark& initial);

  ~DurableMarker();
  DurableMarker(const DurableMarker&) = delete;
  DurableMarker& operator=(const DurableMarker&) = delete;

  // Records `mark` unless it is below the last one (marks never go back).
  // Not synced. Failures are ignored: the marker only ever lags.
  void Update(const DurableMark& mark);
  // fsyncs the marker.
  [[nodiscard]] absl::Status Sync();

  [[nodiscard]] DurableMark last() const;
  const std::string& path() const { return path_; }

 private:
  DurableMarker(std::string path, int fd, const DurableMark& mark)
      : path_(std::move(path)), fd_(fd), last_(mark) {}
  void WriteLocked(const DurableMark& mark) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const int fd_;
  mutable absl::Mutex mu_;
  DurableMark last_ ABSL_GUARDED_BY(mu_);
};

// Text of a marker holding `mark` (fixed size), and back. For the marker
// and its tests.
[[nodiscard]] std::string EncodeDurableMark(const DurableMark& mark);
[[nodiscard]] std::optional<DurableMark> DecodeDurableMark(
    const std::string& text);

}  // namespace dedup

#endif  // DEDUP_STORAGE_DURABLE_MARKER_H_
