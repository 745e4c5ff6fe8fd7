#include "journal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

namespace powerfs {
namespace {

constexpr char kKeptName[] = ".powerfs";

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

std::string Base(const std::string& path) {
  return path.substr(path.rfind('/') + 1);
}

int Errno() { return -errno; }

}  // namespace

std::map<ino_t, std::string> InodePaths(const std::string& root) {
  std::map<ino_t, std::string> paths;
  std::error_code error;
  struct stat st;
  if (lstat(root.c_str(), &st) == 0) paths.emplace(st.st_ino, root);
  for (auto it = std::filesystem::recursive_directory_iterator(root, error);
       !error && it != std::filesystem::recursive_directory_iterator();
       it.increment(error)) {
    const std::string path = it->path().string();
    if (lstat(path.c_str(), &st) == 0) paths.emplace(st.st_ino, path);
  }
  return paths;
}

Journal::Journal(std::string backing, bool lying_sync)
    : backing_(std::move(backing)),
      kept_dir_(backing_ + "/" + kKeptName),
      lying_sync_(lying_sync) {}

std::string Journal::Backing(const std::string& path) const {
  return path == "/" ? backing_ : backing_ + path;
}

bool Journal::Hidden(const std::string& path) {
  const std::string kept = std::string("/") + kKeptName;
  return path == kept || path.rfind(kept + "/", 0) == 0;
}

int Journal::Start() {
  std::error_code error;
  std::filesystem::remove_all(kept_dir_, error);
  if (mkdir(kept_dir_.c_str(), 0700) != 0) return Errno();
  return 0;
}

bool Journal::powered_off() const {
  std::lock_guard<std::mutex> lock(mu_);
  return off_;
}

int Journal::CheckLocked() const { return off_ ? -EIO : 0; }

void Journal::SaveFileUndoLocked(int fd, off_t offset, off_t length) {
  struct stat st;
  if (fstat(fd, &st) != 0) return;
  auto [it, inserted] = files_.try_emplace(st.st_ino);
  FileUndo& undo = it->second;
  if (inserted) undo.durable_size = st.st_size;
  undo.bytes_written += static_cast<uint64_t>(length);
  // Bytes at or past the durable size need no pre-image: the size goes back.
  const off_t end = std::min<off_t>(offset + length, undo.durable_size);
  if (offset >= end) return;
  std::string bytes(static_cast<size_t>(end - offset), '\0');
  const ssize_t got = pread(fd, bytes.data(), bytes.size(), offset);
  // Past the current end (a shrink saved them already) there is nothing.
  if (got <= 0) return;
  bytes.resize(static_cast<size_t>(got));
  undo.pre_images.push_back(Range{offset, std::move(bytes)});
}

void Journal::SaveDirLocked(const std::string& dir_path) {
  const std::string dir = Backing(dir_path);
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0 || dirs_.count(st.st_ino) != 0) return;
  DirSnapshot& snapshot = dirs_[st.st_ino];
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (struct dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || (dir_path == "/" && name == kKeptName)) {
      continue;
    }
    struct stat child;
    if (fstatat(dirfd(d), e->d_name, &child, AT_SYMLINK_NOFOLLOW) == 0) {
      snapshot[name] = Entry{child.st_ino, S_ISDIR(child.st_mode)};
    }
  }
  closedir(d);
}

bool Journal::ReferencedLocked(ino_t ino) const {
  for (const auto& [dir, snapshot] : dirs_) {
    for (const auto& [name, entry] : snapshot) {
      if (entry.ino == ino) return true;
    }
  }
  return false;
}

// Keeps the inode at `path` reachable from the kept directory so that a
// durable name can be given back to it at a power cut.
int Journal::KeepLocked(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return Errno();
  if (kept_.count(st.st_ino) != 0) return 0;
  const std::string kept = kept_dir_ + "/k" + std::to_string(++kept_counter_);
  const int rc = S_ISDIR(st.st_mode) ? rename(path.c_str(), kept.c_str())
                                     : link(path.c_str(), kept.c_str());
  if (rc != 0) return Errno();
  kept_[st.st_ino] = kept;
  return 0;
}

void Journal::ForgetIfUnreachableLocked(ino_t ino, const struct stat& st) {
  if (kept_.count(ino) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    dirs_.erase(ino);
  } else if (st.st_nlink <= 1) {
    files_.erase(ino);
  }
}

void Journal::CollectKeptLocked() {
  std::vector<ino_t> dropped;
  for (auto it = kept_.begin(); it != kept_.end();) {
    if (ReferencedLocked(it->first)) {
      ++it;
      continue;
    }
    std::error_code error;
    std::filesystem::remove_all(it->second, error);
    dropped.push_back(it->first);
    it = kept_.erase(it);
  }
  if (dropped.empty()) return;
  // An inode may still have names in the mount: only forget it if not.
  const std::map<ino_t, std::string> names = InodePaths(backing_);
  for (ino_t ino : dropped) {
    if (names.count(ino) == 0) files_.erase(ino);
    dirs_.erase(ino);
  }
}

int Journal::Open(const std::string& path, int flags, mode_t mode,
                  bool create) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int rc = CheckLocked(); rc != 0) return rc;
  if (create) SaveDirLocked(Parent(path));
  // Durability is modelled here, not asked of the backing file system; the
  // kernel gives O_APPEND writes their offset.
  int backing_flags =
      flags & ~(O_TRUNC | O_APPEND | O_DIRECT | O_SYNC | O_DSYNC | O_ACCMODE);
  backing_flags |= (flags & O_ACCMODE) == O_RDONLY ? O_RDONLY : O_RDWR;
  const int fd = open(Backing(path).c_str(), backing_flags | O_CLOEXEC, mode);
  if (fd < 0) return Errno();
  if ((flags & O_TRUNC) != 0 && (flags & O_ACCMODE) != O_RDONLY) {
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
      SaveFileUndoLocked(fd, 0, st.st_size);
      if (ftruncate(fd, 0) != 0) {
        const int rc = Errno();
        close(fd);
        return rc;
      }
    }
  }
  return fd;
}

void Journal::Release(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  struct stat st;
  if (fstat(fd, &st) == 0 && st.st_nlink == 0) files_.erase(st.st_ino);
  close(fd);
}

int Journal::Write(int fd, bool sync_each_write, const char* data, size_t size,
                   off_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int rc = CheckLocked(); rc != 0) return rc;
  SaveFileUndoLocked(fd, offset, static_cast<off_t>(size));
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, data + done, size - done, offset + done);
    if (n < 0) return done > 0 ? static_cast<int>(done) : Errno();
    done += static_cast<size_t>(n);
  }
  if (sync_each_write && !lying_sync_) {
    struct stat st;
    if (fstat(fd, &st) == 0) files_.erase(st.st_ino);
  }
  return static_cast<int>(done);
}

int Journal::Truncate(const std::string& path, int fd, off_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int rc = CheckLocked(); rc != 0) return rc;
  const bool own_fd = fd < 0;
  if (own_fd) fd = open(Backing(path).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Errno();
  struct stat st;
  int rc = fstat(fd, &st) == 0 ? 0 : Errno();
  if (rc == 0) {
    SaveFileUndoLocked(fd, size, std::max<off_t>(0, st.st_size - size));
    if (ftruncate(fd, size) != 0) rc = Errno();
  }
  if (own_fd) close(fd);
  return rc;
}

int Journal::Fallocate(int fd, int mode, off_t offset, off_t length) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int rc = CheckLocked(); rc != 0) return rc;
  const bool changes_bytes =
      (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE |
               FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE)) != 0;
  struct stat st;
  if (fstat(fd, &st) != 0) return Errno();
  // Collapse and insert move every byte after `offset`.
  const bool shifts =
      (mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE)) != 0;
  const off_t saved = !changes_bytes ? 0
                      : shifts       ? std::max<off_t>(0, st.st_size - offset)
                                     : length;
  SaveFileUndoLocked(fd, offset, saved);
  return fallocate(fd, mode, offset, length) == 0 ? 0 : Errno();
}

int Journal::SyncFile(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int rc = CheckLocked(); rc != 0) return rc;
  if (lying_sync_) return 0;
  struct stat st;
  if (fstat(fd, &st) != 0) return Errno();
  files_.erase(st.st_ino);
  return 0;
}

int Journal::SyncDir(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int rc = CheckLocked(); rc != 0) return rc;
  if (lying_sync_) return 0;
  struct stat st;
  if (lstat(Backing(path).c_str(), &st) != 0) return Errno();
  const ino_t dir = st.st_ino;
  dirs_.erase(dir);
  // A rename is one change: syncing either directory commits both halves.
  for (auto it = renames_.begin(); it != renames_.end();) {
    if (it->from_dir != dir && it->to_dir != dir) {
      ++it;
      continue;
    }
    if (auto to = dirs_.find(it->to_dir); to != dirs_.end()) {
      to->second[it->to_name] = it->entry;
    }
    if (auto from = dirs_.find(it->from_dir); from != dirs_.end()) {
      auto name = from->second.find(it->from_name);
      if (name != from->second.end() && name->second.ino == it->entry.ino) {
        from->second.erase(name);
      }
    }
    it = renames_.erase(it);
  }
  CollectKeptLocked();
  return 0;
}

int Journal::Mknod(const std::string& path, mode_t mode, dev_t dev) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int rc = CheckLocked(); rc != 0) return rc;
  SaveDirLocked(Parent(path));
  return mknod(Backing(path).c_str(), mode, dev) == 0 ? 0 : Errno();
}

int Journal::Mkdir(const std::string& path, mode_t mode) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int rc = CheckLocked(); rc != 0) return rc;
  SaveDirLocked(Parent(path));
  return mkdir(Backing(path).c_str(), mode) == 0 ? 0 : Errno();
}

int Journal::Symlink(const std::string& target, const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int rc = CheckLocked(); rc != 0) return rc;
  SaveDirLocked(Parent(path));
  return symlink(target.c_str(), Backing(path).c_str()) == 0 ? 0 : Errno();
}

int Journal::Link(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int rc = CheckLocked(); rc != 0) return rc;
  SaveDirLocked(Parent(to));
  return link(Backing(from).c_str(), Backing(to).c_str()) == 0 ? 0 : Errno();
}

int Journal::Unlink(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int rc = CheckLocked(); rc != 0) return rc;
  SaveDirLocked(Parent(path));
  const std::string backing = Backing(path);
  struct stat st;
  if (lstat(backing.c_str(), &st) != 0) return Errno();
  if (S_ISDIR(st.st_mode)) return -EISDIR;
  if (ReferencedLocked(st.st_ino)) {
    if (int rc = KeepLocked(backing); rc != 0) return rc;
  }
  if (unlink(backing.c_str()) != 0) return Errno();
  ForgetIfUnreachableLocked(st.st_ino, st);
  return 0;
}

int Journal::Rmdir(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int rc = CheckLocked(); rc != 0) return rc;
  SaveDirLocked(Parent(path));
  const std::string backing = Backing(path);
  struct stat st;
  if (lstat(backing.c_str(), &st) != 0) return Errno();
  if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
  if (!ReferencedLocked(st.st_ino)) {
    if (rmdir(backing.c_str()) != 0) return Errno();
    dirs_.erase(st.st_ino);
    return 0;
  }
  std::error_code error;
  if (!std::filesystem::is_empty(backing, error)) return -ENOTEMPTY;
  return KeepLocked(backing);
}

int Journal::Rename(const std::string& from, const std::string& to,
                    unsigned int flags) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int rc = CheckLocked(); rc != 0) return rc;
  if ((flags & RENAME_EXCHANGE) != 0) return -EINVAL;
  SaveDirLocked(Parent(from));
  SaveDirLocked(Parent(to));
  const std::string src = Backing(from), dst = Backing(to);
  struct stat from_st, to_st;
  if (lstat(src.c_str(), &from_st) != 0) return Errno();
  const bool replaces = lstat(dst.c_str(), &to_st) == 0;
  if (replaces && from_st.st_ino == to_st.st_ino) return 0;
  if (replaces && (flags & RENAME_NOREPLACE) != 0) return -EEXIST;
  if (replaces && ReferencedLocked(to_st.st_ino)) {
    if (S_ISDIR(to_st.st_mode)) {
      std::error_code error;
      if (!S_ISDIR(from_st.st_mode)) return -EISDIR;
      if (!std::filesystem::is_empty(dst, error)) return -ENOTEMPTY;
    } else if (S_ISDIR(from_st.st_mode)) {
      return -ENOTDIR;
    }
    if (int rc = KeepLocked(dst); rc != 0) return rc;
  }
  if (rename(src.c_str(), dst.c_str()) != 0) return Errno();
  if (replaces) ForgetIfUnreachableLocked(to_st.st_ino, to_st);
  struct stat from_dir, to_dir;
  if (lstat(Backing(Parent(from)).c_str(), &from_dir) == 0 &&
      lstat(Backing(Parent(to)).c_str(), &to_dir) == 0 &&
      from_dir.st_ino != to_dir.st_ino) {
    renames_.push_back(
        PendingRename{from_dir.st_ino, to_dir.st_ino, Base(from), Base(to),
                      Entry{from_st.st_ino, S_ISDIR(from_st.st_mode)}});
  }
  return 0;
}

void Journal::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  off_ = true;
  files_.clear();
  dirs_.clear();
  renames_.clear();
  kept_.clear();
  std::error_code error;
  std::filesystem::remove_all(kept_dir_, error);
}

}  // namespace powerfs
