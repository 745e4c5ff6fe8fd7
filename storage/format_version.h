// The on-disk format of a data dir, as one number recorded in the dir itself,
// so that a binary can tell a dir it understands from one a newer release
// wrote, and backups can say which format they hold.
//
// Contract (owned by the format/upgrade work; backups only read it):
// - kDataFormatVersion is what this binary writes; it reads every version from
//   kOldestReadableFormatVersion up to kDataFormatVersion.
// - A data dir without kFormatFileName was written before the file existed and
//   is format kOldestReadableFormatVersion.
#ifndef DEDUP_STORAGE_FORMAT_VERSION_H_
#define DEDUP_STORAGE_FORMAT_VERSION_H_

#include <cstdint>

namespace dedup::storage {

inline constexpr uint32_t kOldestReadableFormatVersion = 1;
inline constexpr uint32_t kDataFormatVersion = 1;
// A text file directly under --data_dir.
inline constexpr char kFormatFileName[] = "DEDUP-FORMAT";

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_FORMAT_VERSION_H_
