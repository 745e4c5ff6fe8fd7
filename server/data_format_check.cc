#include "server/data_format_check.h"

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "server/exit_status.h"

namespace dedup {

absl::StatusOr<storage::DataFormat> CheckDataDirFormat(
    const std::string& data_dir) {
  absl::StatusOr<storage::DataFormat> found = storage::ReadDataFormat(data_dir);
  if (!found.ok())
    return ExitWith(exit_code::kDataDir, found.status().message());
  if (absl::Status s = storage::CheckDataFormatReadable(data_dir, *found);
      !s.ok()) {
    return ExitWith(exit_code::kDataFormat, s.message());
  }
  return found;
}

absl::Status RecordDataDirFormat(const std::string& data_dir,
                                 const storage::DataFormat& found) {
  if (found.recorded && found.version == storage::kDataFormatVersion) {
    return absl::OkStatus();
  }
  if (absl::Status s = storage::RecordDataFormat(data_dir, found); !s.ok()) {
    return ExitWith(
        exit_code::kDataDir,
        absl::StrCat("cannot record the data dir's format: ", s.message()));
  }
  LogInfo("data dir ", data_dir, ": format ", storage::kDataFormatVersion,
          " recorded in ", storage::kFormatFileName,
          found.recorded
              ? absl::StrCat(" (upgraded from format ", found.version, ")")
              : " (the dir had no format file)");
  return absl::OkStatus();
}

}  // namespace dedup
