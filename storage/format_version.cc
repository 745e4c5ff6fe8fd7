#include "storage/format_version.h"

#include <errno.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "storage/durable_dir.h"

namespace dedup::storage {
namespace {

std::string FormatPath(const std::string& data_dir) {
  return absl::StrCat(data_dir, "/", kFormatFileName);
}

}  // namespace

absl::StatusOr<DataFormat> ReadDataFormat(const std::string& data_dir) {
  const std::string path = FormatPath(data_dir);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    // ENOTDIR: --data_dir is a file, which the caller reports.
    if (access(path.c_str(), F_OK) != 0 &&
        (errno == ENOENT || errno == ENOTDIR)) {
      return DataFormat{};
    }
    return absl::UnavailableError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  uint32_t version = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text.str()), &version) ||
      version == 0) {
    return absl::DataLossError(absl::StrCat(
        path, " is damaged: it should hold the data dir's format version (a ",
        "number; this dedupd writes ", kDataFormatVersion,
        "). Restore the data dir from a backup or a replica, or write the ",
        "version of the release that made the dir into it"));
  }
  return DataFormat{version, true};
}

absl::Status CheckDataFormatReadable(const std::string& data_dir,
                                     const DataFormat& format) {
  if (format.version > kDataFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data dir ", data_dir, " has format ", format.version, " (",
        kFormatFileName,
        "), written by a newer dedupd; this one reads formats ",
        kOldestReadableFormatVersion, " to ", kDataFormatVersion,
        ". Run a release that reads format ", format.version,
        " (a downgrade needs a backup taken before the upgrade); nothing in ",
        "the dir was changed"));
  }
  if (format.version < kOldestReadableFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data dir ", data_dir, " has format ", format.version, " (",
        kFormatFileName, "), too old for this dedupd, which reads formats ",
        kOldestReadableFormatVersion, " to ", kDataFormatVersion,
        ". Open it with an earlier release first, which upgrades it; nothing ",
        "in the dir was changed"));
  }
  return absl::OkStatus();
}

absl::Status RecordDataFormat(const std::string& data_dir,
                              const DataFormat& found) {
  if (found.recorded && found.version == kDataFormatVersion) {
    return absl::OkStatus();
  }
  return ReplaceFileDurably(FormatPath(data_dir),
                            absl::StrCat(kDataFormatVersion, "\n"));
}

}  // namespace dedup::storage
