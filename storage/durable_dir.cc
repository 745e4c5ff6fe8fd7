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

namespace {

// Writes `contents` into a fresh `tmp` and fsyncs it: 0 or the errno.
int WriteSynced(const std::string& tmp, const std::string& contents,
                mode_t mode) {
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return errno;
  errno = 0;
  const bool ok = ::write(fd, contents.data(), contents.size()) ==
                      static_cast<ssize_t>(contents.size()) &&
                  ::fsync(fd) == 0;
  const int error = ok ? 0 : (errno != 0 ? errno : EIO);
  ::close(fd);
  return error;
}

absl::Status WriteError(const std::string& path, int error) {
  const std::string message =
      absl::StrCat("cannot write ", path, ": ", std::strerror(error));
  return error == ENOSPC || error == EDQUOT
             ? absl::ResourceExhaustedError(message)
             : absl::UnavailableError(message);
}

absl::Status SyncParent(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return SyncPath(dir.empty() ? "." : dir);
}

}  // namespace

absl::Status ReplaceFileDurably(const std::string& path,
                                const std::string& contents) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  int error = WriteSynced(tmp, contents, 0644);
  if (error == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(tmp.c_str());
    return WriteError(path, error);
  }
  return SyncParent(path);
}

absl::Status CreateFileDurably(const std::string& path,
                               const std::string& contents, mode_t mode) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  int error = WriteSynced(tmp, contents, mode);
  // link, unlike rename, never replaces a file another process made first.
  if (error == 0 && ::link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST) {
    error = errno;
  }
  ::unlink(tmp.c_str());
  if (error != 0) return WriteError(path, error);
  return SyncParent(path);
}

}  // namespace dedup
