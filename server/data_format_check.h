// The data dir's format version at start (storage/format_version.h), as
// dedupd's start-up steps: refused before anything touches the dir,
// recorded once the store opened it.
#ifndef DEDUP_SERVER_DATA_FORMAT_CHECK_H_
#define DEDUP_SERVER_DATA_FORMAT_CHECK_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/format_version.h"

namespace dedup {

// What `data_dir` says about its format, when this binary reads it.
// Otherwise an exit status (exit_status.h): exit_code::kDataFormat for a
// version it cannot read, naming both versions; exit_code::kDataDir for a
// damaged or unreadable format file. Changes nothing on disk.
[[nodiscard]] absl::StatusOr<storage::DataFormat> CheckDataDirFormat(
    const std::string& data_dir);

// After the store opened `data_dir` and it passed its checks: records this
// binary's format when `found` differs (a new dir, one from before the file
// existed, an older format), logging the change. exit_code::kDataDir when
// the file cannot be written.
[[nodiscard]] absl::Status RecordDataDirFormat(
    const std::string& data_dir, const storage::DataFormat& found);

}  // namespace dedup

#endif  // DEDUP_SERVER_DATA_FORMAT_CHECK_H_
