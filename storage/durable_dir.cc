#include "storage/durable_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "storage/state_dir_swap.h"

namespace dedup {

absl::Status CreateDirectoriesDurably(const std::string& path) {
  std::filesystem::path dir =
      std::filesystem::absolute(path).lexically_normal();
  if (dir.has_filename() == false) dir = dir.parent_path();
  // The components to make, deepest first.
  std::vector<std::filesystem::path> missing;
  std::error_code ec;
  for (std::filesystem::path p = dir; !std::filesystem::exists(p, ec);
       p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.root_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("cannot create ", it->string(),
                                              ": ", std::strerror(errno)));
    }
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir.string(), " is not a directory"));
  }
  // Each new name is made durable in its parent, deepest last, so that a
  // cut never leaves a durable child under a parent that vanished.
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (absl::Status s = SyncPath(*it); !s.ok()) return s;
    if (absl::Status s = SyncPath(it->parent_path()); !s.ok()) return s;
  }
  if (!missing.empty()) return absl::OkStatus();
  if (absl::Status s = SyncPath(dir); !s.ok()) return s;
  return SyncPath(dir.parent_path());
}

absl::Status ReplaceFileDurably(const std::string& path,
                                const std::string& contents) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && ::write(fd, contents.data(), contents.size()) ==
                           static_cast<ssize_t>(contents.size());
  ok = ok && ::fsync(fd) == 0;
  const int error = errno;
  if (fd >= 0) ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int why = ok ? errno : error;
    ::unlink(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(why)));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return SyncPath(dir.empty() ? "." : dir);
}

}  // namespace dedup
