#include "storage/state_dir_swap.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace dedup {
namespace {

namespace fs = std::filesystem;

std::string OldDirOf(const std::string& dir) { return dir + ".old"; }

std::string ParentOf(const std::string& dir) {
  const fs::path parent = fs::path(dir).parent_path();
  return parent.empty() ? "." : parent.string();
}

absl::Status FsError(absl::string_view what, const std::string& path,
                     const std::error_code& ec) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", ec.message()));
}

bool Exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

absl::Status RemoveAll(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return FsError("cannot remove", path, ec);
  return absl::OkStatus();
}

absl::Status Rename(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) return FsError(absl::StrCat("cannot rename to ", to, ":"), from, ec);
  return absl::OkStatus();
}

}  // namespace

std::string IncomingDirOf(const std::string& dir) { return dir + ".incoming"; }

absl::Status SyncPath(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  const int rv = fsync(fd);
  const int error = errno;
  close(fd);
  if (rv != 0) {
    return absl::InternalError(
        absl::StrCat("cannot fsync ", path, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

absl::Status SwapInStateDir(const std::string& incoming,
                            const std::string& dir) {
  const std::string old = OldDirOf(dir);
  if (absl::Status s = RemoveAll(old); !s.ok()) return s;
  if (Exists(dir)) {
    if (absl::Status s = Rename(dir, old); !s.ok()) return s;
  }
  if (absl::Status s = Rename(incoming, dir); !s.ok()) return s;
  // From here on, a restart opens the new copy.
  if (absl::Status s = SyncPath(ParentOf(dir)); !s.ok()) return s;
  return RemoveAll(old);
}

absl::Status RecoverStateDir(const std::string& dir) {
  const std::string incoming = IncomingDirOf(dir);
  const std::string old = OldDirOf(dir);
  if (!Exists(dir) && Exists(old)) {
    // Interrupted between the two renames: the incoming copy was complete
    // (it is only swapped in once fetched and synced). Without it, the old
    // copy is the database.
    const std::string& keep = Exists(incoming) ? incoming : old;
    if (absl::Status s = Rename(keep, dir); !s.ok()) return s;
    if (absl::Status s = SyncPath(ParentOf(dir)); !s.ok()) return s;
  }
  if (absl::Status s = RemoveAll(incoming); !s.ok()) return s;
  return RemoveAll(old);
}

}  // namespace dedup
