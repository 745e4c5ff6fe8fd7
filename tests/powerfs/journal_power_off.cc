// Journal::PowerOff: puts the backing directory back to its durable state.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "journal.h"

namespace powerfs {
namespace {

constexpr size_t kMaxPaths = 200;

void Note(std::vector<std::string>* list, std::string path) {
  if (list->size() < kMaxPaths) list->push_back(std::move(path));
}

void Fail(const char* what, const std::string& path, PowerOffReport* report) {
  fprintf(stderr, "powerfs: power off: %s %s: %s\n", what, path.c_str(),
          strerror(errno));
  ++report->errors;
}

// Current names of directory `dir` (without the kept directory).
std::map<std::string, ino_t> Names(const std::string& dir,
                                   const std::string& hidden) {
  std::map<std::string, ino_t> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (struct dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || dir + "/" + name == hidden) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      names[name] = st.st_ino;
    }
  }
  closedir(d);
  return names;
}

}  // namespace

PowerOffReport Journal::PowerOff() {
  std::lock_guard<std::mutex> lock(mu_);
  PowerOffReport report;
  off_ = true;
  UndoDataLocked(&report);
  UndoNamesLocked(&report);
  std::error_code error;
  std::filesystem::remove_all(kept_dir_, error);
  files_.clear();
  dirs_.clear();
  renames_.clear();
  kept_.clear();
  return report;
}

void Journal::UndoDataLocked(PowerOffReport* report) {
  const std::map<ino_t, std::string> paths = InodePaths(backing_);
  for (const auto& [ino, undo] : files_) {
    auto path = paths.find(ino);
    // No name reaches the file: it is gone whatever it held.
    if (path == paths.end()) continue;
    const int fd = open(path->second.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      Fail("open", path->second, report);
      continue;
    }
    struct stat st;
    const bool changed = fstat(fd, &st) == 0 &&
                         (st.st_size != undo.durable_size ||
                          !undo.pre_images.empty() || undo.bytes_written > 0);
    if (ftruncate(fd, undo.durable_size) != 0) {
      Fail("truncate", path->second, report);
    }
    for (auto it = undo.pre_images.rbegin(); it != undo.pre_images.rend();
         ++it) {
      if (pwrite(fd, it->bytes.data(), it->bytes.size(), it->offset) !=
          static_cast<ssize_t>(it->bytes.size())) {
        Fail("write back", path->second, report);
      }
    }
    close(fd);
    if (!changed) continue;
    ++report->files;
    report->bytes_lost += undo.bytes_written;
    Note(&report->data_paths, path->second.substr(backing_.size()));
  }
}

void Journal::UndoNamesLocked(PowerOffReport* report) {
  auto relative = [this](const std::string& path) {
    return path.rfind(kept_dir_, 0) == 0 ? std::string("(removed)")
                                         : path.substr(backing_.size());
  };
  // First every name that is not durable goes (into the kept directory, as
  // its inode may be what a durable name elsewhere reaches)...
  for (const auto& [dir_ino, snapshot] : dirs_) {
    const auto dir = InodePaths(backing_)[dir_ino];
    if (dir.empty()) continue;
    for (const auto& [name, ino] : Names(dir, kept_dir_)) {
      auto durable = snapshot.find(name);
      if (durable != snapshot.end() && durable->second.ino == ino) continue;
      const std::string path = dir + "/" + name;
      if (KeepLocked(path) != 0) {
        Fail("keep", path, report);
        continue;
      }
      // A directory was moved by KeepLocked; a file still has this name.
      struct stat st;
      if (lstat(path.c_str(), &st) == 0 && unlink(path.c_str()) != 0) {
        Fail("unlink", path, report);
      }
      ++report->names_removed;
      Note(&report->removed, relative(path));
    }
  }
  // ...then every durable name comes back, to its inode wherever it is now.
  for (const auto& [dir_ino, snapshot] : dirs_) {
    const std::map<ino_t, std::string> paths = InodePaths(backing_);
    auto dir = paths.find(dir_ino);
    if (dir == paths.end()) continue;
    const std::map<std::string, ino_t> names = Names(dir->second, kept_dir_);
    // Links leave every path valid; only a directory moved back changes them.
    std::map<ino_t, std::string> all = paths;
    for (const auto& [name, entry] : snapshot) {
      if (names.count(name) != 0) continue;
      const std::string path = dir->second + "/" + name;
      auto source = all.find(entry.ino);
      if (source == all.end()) {
        errno = ENOENT;
        Fail("find the inode of", path, report);
        continue;
      }
      const int rc = entry.is_dir ? rename(source->second.c_str(), path.c_str())
                                  : link(source->second.c_str(), path.c_str());
      if (rc != 0) {
        Fail("restore", path, report);
        continue;
      }
      if (entry.is_dir) all = InodePaths(backing_);
      ++report->names_restored;
      Note(&report->restored, relative(path));
    }
  }
}

}  // namespace powerfs
