// The on-disk format of a data dir, as one number recorded in the dir itself,
// so that a binary can tell a dir it understands from one a newer release
// wrote, and backups can say which format they hold.
//
// Contract (owned by the format/upgrade work; backups only read it):
// - kDataFormatVersion is what this binary writes; it reads every version from
//   kOldestReadableFormatVersion up to kDataFormatVersion.
// - A data dir without kFormatFileName was written before the file existed and
//   is format kOldestReadableFormatVersion.
//
// What one version covers: everything under the data dir that dedup itself
// encodes. Format 1 is
// - records: the record codec's versions 1 and 2 (record.h), under the
//   storage keys of storage_key.h, fence reservations and the replicated
//   state's metadata keys (applied index, replicated clock, members);
// - Raft log entries: log entry versions 1 and 2 (log_entry.h), snapshot
//   descriptors "dedup-snapshot/1", in libraft 0.15's own files;
// - metadata files: DEDUP-DURABLE ("dedup-durable v1"), event-log.key,
//   raft/recovered_as_sole_voter, and this file.
// The codecs' own version bytes let one format hold old and new encodings
// side by side; this number changes when a binary starts writing something
// the previous release cannot read (a new record or entry version, a new
// key or file whose absence would mislead it). Bytes that also cross the
// network (log entries, fetched checkpoints) must be read by every member
// before any member writes them: the release that reads format N+1 keeps
// writing N.
//
// The file: kFormatFileName directly under --data_dir, holding the version
// in decimal and a newline. dedupd reads it before it touches anything in
// the dir, refuses a version it cannot read, and records kDataFormatVersion
// once the dir opened and passed its checks (upgrading an older dir in
// place: format 1 needs no conversion), so a dir refused as damaged is left
// for the release that wrote it. A later format must be recorded before the
// first byte of it is written; a group member applies entries while its
// store opens, so such a format is recorded before the open instead.
//
// Thread safety: none needed; callers own the dir.
#ifndef DEDUP_STORAGE_FORMAT_VERSION_H_
#define DEDUP_STORAGE_FORMAT_VERSION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dedup::storage {

inline constexpr uint32_t kOldestReadableFormatVersion = 1;
inline constexpr uint32_t kDataFormatVersion = 1;
// A text file directly under --data_dir.
inline constexpr char kFormatFileName[] = "DEDUP-FORMAT";

// What a data dir says about its format.
struct DataFormat {
  // kOldestReadableFormatVersion when the file is missing.
  uint32_t version = kOldestReadableFormatVersion;
  // Whether kFormatFileName exists: false for a new (or missing) dir and for
  // one written before the file existed.
  bool recorded = false;
};

// Reads `data_dir`'s format file without changing anything. A missing dir or
// file is {kOldestReadableFormatVersion, false}. DataLossError naming the
// file when it holds no version; UnavailableError when it cannot be read.
[[nodiscard]] absl::StatusOr<DataFormat> ReadDataFormat(
    const std::string& data_dir);

// OK when this binary reads `format`; otherwise FailedPreconditionError
// naming the dir, both versions and what to do (a newer dir: run a release
// that reads it; an older one: open it with a release that upgrades it).
[[nodiscard]] absl::Status CheckDataFormatReadable(const std::string& data_dir,
                                                   const DataFormat& format);

// Makes `data_dir`'s format file say kDataFormatVersion, durably
// (ReplaceFileDurably), unless `found` (what ReadDataFormat said before the
// dir was opened) already does. Call only once the dir opened and passed its
// checks. ResourceExhausted on a full disk, Unavailable otherwise.
[[nodiscard]] absl::Status RecordDataFormat(const std::string& data_dir,
                                            const DataFormat& found);

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_FORMAT_VERSION_H_
