// The heart of powerfs: every change to the backing directory goes through a
// Journal, which makes the change and remembers how to undo it until it is
// durable under the model of tests/powerfs/README.md (file data: fsync of the
// file; names: fsync of the parent directory; a rename: fsync of either
// directory). PowerOff() undoes everything not durable, so the backing
// directory then holds exactly what a machine would find after a power cut.
//
// The backing directory always holds the current state (reads need no
// bookkeeping); undo information is kept in memory, except for files whose
// names were removed but could come back, which stay hard-linked (or, for
// directories, moved) into BACKING/.powerfs until the removal is durable.
//
// Paths given to the Journal are relative to the mount ("/a/b"), never
// inside .powerfs. Methods return 0 or a negative errno, as FUSE wants.
//
// Thread safety: every method may be called from any thread; one mutex
// serializes changes (the pre-image read and the write it protects must be
// atomic). After PowerOff() every method fails with -EIO.
#ifndef DEDUP_TESTS_POWERFS_JOURNAL_H_
#define DEDUP_TESTS_POWERFS_JOURNAL_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace powerfs {

// What a power cut undid: tests read it to know what the cut hit.
struct PowerOffReport {
  int files = 0;            // files whose data or size went back
  uint64_t bytes_lost = 0;  // bytes written since the last sync, undone
  int names_restored = 0;
  int names_removed = 0;
  std::vector<std::string> data_paths;  // those files (a name of each)
  std::vector<std::string> restored;    // names that came back
  std::vector<std::string> removed;     // names that disappeared
  int errors = 0;  // undo steps that failed (logged); a test should fail
};

// Every inode under `root` (itself included) and one path (absolute) to it.
std::map<ino_t, std::string> InodePaths(const std::string& root);

class Journal {
 public:
  // `backing`: an existing directory. `lying_sync`: syncs make nothing
  // durable (a disk that lies), so PowerOff loses everything since start.
  Journal(std::string backing, bool lying_sync);
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  const std::string& backing() const { return backing_; }
  // The backing path of mount path `path`.
  std::string Backing(const std::string& path) const;
  // Whether `path` is the journal's own directory, hidden from the mount.
  static bool Hidden(const std::string& path);
  // Removes what a previous run left in BACKING/.powerfs and makes it again.
  [[nodiscard]] int Start();
  bool powered_off() const;

  // Opens the backing file (O_CREAT when `create`); returns the fd or -errno.
  // The fd is always readable so pre-images can be read; O_TRUNC is done
  // here as a journaled truncate.
  [[nodiscard]] int Open(const std::string& path, int flags, mode_t mode,
                         bool create);
  // Closes `fd`; forgets the undo of a file no name reaches any more.
  void Release(int fd);
  [[nodiscard]] int Write(int fd, bool sync_each_write, const char* data,
                          size_t size, off_t offset);
  [[nodiscard]] int Truncate(const std::string& path, int fd, off_t size);
  [[nodiscard]] int Fallocate(int fd, int mode, off_t offset, off_t length);
  [[nodiscard]] int SyncFile(int fd);
  [[nodiscard]] int SyncDir(const std::string& path);

  [[nodiscard]] int Mknod(const std::string& path, mode_t mode, dev_t dev);
  [[nodiscard]] int Mkdir(const std::string& path, mode_t mode);
  [[nodiscard]] int Symlink(const std::string& target, const std::string& path);
  [[nodiscard]] int Link(const std::string& from, const std::string& to);
  [[nodiscard]] int Unlink(const std::string& path);
  [[nodiscard]] int Rmdir(const std::string& path);
  [[nodiscard]] int Rename(const std::string& from, const std::string& to,
                           unsigned int flags);

  // Puts the backing directory back to its durable state and refuses all
  // further changes.
  PowerOffReport PowerOff();
  // A clean unmount: everything is durable; the kept files are dropped.
  void Shutdown();

 private:
  struct Range {
    off_t offset;
    std::string bytes;  // what the file held there before the change
  };
  struct FileUndo {
    off_t durable_size = 0;
    std::vector<Range> pre_images;  // applied in reverse order
    uint64_t bytes_written = 0;
  };
  struct Entry {
    ino_t ino;
    bool is_dir;
  };
  // A directory's names as of its last fsync (only for directories changed
  // since then).
  using DirSnapshot = std::map<std::string, Entry>;
  struct PendingRename {
    ino_t from_dir, to_dir;
    std::string from_name, to_name;
    Entry entry;
  };

  int CheckLocked() const;
  void SaveFileUndoLocked(int fd, off_t offset, off_t length);
  void SaveDirLocked(const std::string& dir_path);
  int KeepLocked(const std::string& path);
  void ForgetIfUnreachableLocked(ino_t ino, const struct stat& st);
  void CollectKeptLocked();
  bool ReferencedLocked(ino_t ino) const;

  // PowerOff's steps.
  void UndoDataLocked(PowerOffReport* report);
  void UndoNamesLocked(PowerOffReport* report);

  const std::string backing_;
  const std::string kept_dir_;  // BACKING/.powerfs
  const bool lying_sync_;
  mutable std::mutex mu_;
  bool off_ = false;
  std::map<ino_t, FileUndo> files_;
  std::map<ino_t, DirSnapshot> dirs_;
  std::vector<PendingRename> renames_;
  std::map<ino_t, std::string> kept_;  // ino -> path under kept_dir_
  uint64_t kept_counter_ = 0;
};

}  // namespace powerfs

#endif  // DEDUP_TESTS_POWERFS_JOURNAL_H_
