// powerfs: a FUSE pass-through that loses power on command. See
// tests/powerfs/README.md for the model and the commands.
#define FUSE_USE_VERSION 31

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "journal.h"
#include "report_json.h"

namespace powerfs {
namespace {

Journal* journal = nullptr;

int Result(int rc) { return rc == 0 ? 0 : -errno; }

// Read-only operations need no journal, only the power.
#define POWERFS_CHECK(path)                    \
  do {                                         \
    if (journal->powered_off()) return -EIO;   \
    if (Journal::Hidden(path)) return -ENOENT; \
  } while (0)

std::string B(const char* path) { return journal->Backing(path); }

int GetAttr(const char* path, struct stat* st, fuse_file_info* fi) {
  POWERFS_CHECK(path);
  if (fi != nullptr) return Result(fstat(static_cast<int>(fi->fh), st));
  return Result(lstat(B(path).c_str(), st));
}

int ReadLink(const char* path, char* buf, size_t size) {
  POWERFS_CHECK(path);
  const ssize_t n = readlink(B(path).c_str(), buf, size - 1);
  if (n < 0) return -errno;
  buf[n] = '\0';
  return 0;
}

int Access(const char* path, int mask) {
  POWERFS_CHECK(path);
  return Result(access(B(path).c_str(), mask));
}

int StatFs(const char* path, struct statvfs* st) {
  POWERFS_CHECK(path);
  return Result(statvfs(B(path).c_str(), st));
}

int Mknod(const char* path, mode_t mode, dev_t dev) {
  if (Journal::Hidden(path)) return -EACCES;
  return journal->Mknod(path, mode, dev);
}
int Mkdir(const char* path, mode_t mode) {
  if (Journal::Hidden(path)) return -EACCES;
  return journal->Mkdir(path, mode);
}
int Unlink(const char* path) {
  POWERFS_CHECK(path);
  return journal->Unlink(path);
}
int Rmdir(const char* path) {
  POWERFS_CHECK(path);
  return journal->Rmdir(path);
}
int Symlink(const char* target, const char* path) {
  if (Journal::Hidden(path)) return -EACCES;
  return journal->Symlink(target, path);
}
int Rename(const char* from, const char* to, unsigned int flags) {
  if (Journal::Hidden(from) || Journal::Hidden(to)) return -EACCES;
  return journal->Rename(from, to, flags);
}
int Link(const char* from, const char* to) {
  if (Journal::Hidden(from) || Journal::Hidden(to)) return -EACCES;
  return journal->Link(from, to);
}

int Chmod(const char* path, mode_t mode, fuse_file_info*) {
  POWERFS_CHECK(path);
  return Result(chmod(B(path).c_str(), mode));
}
int Chown(const char* path, uid_t uid, gid_t gid, fuse_file_info*) {
  POWERFS_CHECK(path);
  return Result(lchown(B(path).c_str(), uid, gid));
}
int Utimens(const char* path, const struct timespec tv[2], fuse_file_info*) {
  POWERFS_CHECK(path);
  return Result(utimensat(AT_FDCWD, B(path).c_str(), tv, AT_SYMLINK_NOFOLLOW));
}
int Truncate(const char* path, off_t size, fuse_file_info* fi) {
  POWERFS_CHECK(path);
  return journal->Truncate(path, fi ? static_cast<int>(fi->fh) : -1, size);
}

// The handle remembers whether every write through it is durable.
void SetHandle(fuse_file_info* fi, int fd) {
  fi->fh = static_cast<uint64_t>(fd);
  fi->keep_cache = 0;
}
bool SyncEachWrite(const fuse_file_info* fi) {
  return (fi->flags & (O_SYNC | O_DSYNC)) != 0;
}

int Open(const char* path, fuse_file_info* fi) {
  POWERFS_CHECK(path);
  const int fd = journal->Open(path, fi->flags, 0, false);
  if (fd < 0) return fd;
  SetHandle(fi, fd);
  return 0;
}
int Create(const char* path, mode_t mode, fuse_file_info* fi) {
  if (Journal::Hidden(path)) return -EACCES;
  const int fd = journal->Open(path, fi->flags | O_CREAT, mode, true);
  if (fd < 0) return fd;
  SetHandle(fi, fd);
  return 0;
}
int Read(const char*, char* buf, size_t size, off_t offset,
         fuse_file_info* fi) {
  if (journal->powered_off()) return -EIO;
  const ssize_t n = pread(static_cast<int>(fi->fh), buf, size, offset);
  return n < 0 ? -errno : static_cast<int>(n);
}
int Write(const char*, const char* buf, size_t size, off_t offset,
          fuse_file_info* fi) {
  return journal->Write(static_cast<int>(fi->fh), SyncEachWrite(fi), buf, size,
                        offset);
}
int Flush(const char*, fuse_file_info*) {
  return journal->powered_off() ? -EIO : 0;
}
int Release(const char*, fuse_file_info* fi) {
  journal->Release(static_cast<int>(fi->fh));
  return 0;
}
int Fsync(const char*, int, fuse_file_info* fi) {
  return journal->SyncFile(static_cast<int>(fi->fh));
}
int Fallocate(const char*, int mode, off_t offset, off_t length,
              fuse_file_info* fi) {
  return journal->Fallocate(static_cast<int>(fi->fh), mode, offset, length);
}

int OpenDir(const char* path, fuse_file_info* fi) {
  POWERFS_CHECK(path);
  DIR* dir = opendir(B(path).c_str());
  if (dir == nullptr) return -errno;
  fi->fh = reinterpret_cast<uint64_t>(dir);
  return 0;
}
int ReadDir(const char* path, void* buf, fuse_fill_dir_t fill, off_t,
            fuse_file_info* fi, fuse_readdir_flags) {
  if (journal->powered_off()) return -EIO;
  DIR* dir = reinterpret_cast<DIR*>(fi->fh);
  rewinddir(dir);
  const bool root = strcmp(path, "/") == 0;
  while (struct dirent* e = readdir(dir)) {
    if (root && Journal::Hidden(std::string("/") + e->d_name)) continue;
    struct stat st = {};
    st.st_ino = e->d_ino;
    st.st_mode = static_cast<mode_t>(DTTOIF(e->d_type));
    if (fill(buf, e->d_name, &st, 0, static_cast<fuse_fill_dir_flags>(0))) {
      break;
    }
  }
  return 0;
}
int ReleaseDir(const char*, fuse_file_info* fi) {
  closedir(reinterpret_cast<DIR*>(fi->fh));
  return 0;
}
int FsyncDir(const char* path, int, fuse_file_info*) {
  POWERFS_CHECK(path);
  return journal->SyncDir(path);
}

void* Init(fuse_conn_info* conn, fuse_config* cfg) {
  // Inode numbers pass through (tests compare them); every write must reach
  // the journal at once, so no write-back caching in the kernel.
  cfg->use_ino = 1;
  cfg->readdir_ino = 1;
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  return nullptr;
}

fuse_operations Operations() {
  fuse_operations ops = {};
  ops.getattr = GetAttr;
  ops.readlink = ReadLink;
  ops.mknod = Mknod;
  ops.mkdir = Mkdir;
  ops.unlink = Unlink;
  ops.rmdir = Rmdir;
  ops.symlink = Symlink;
  ops.rename = Rename;
  ops.link = Link;
  ops.chmod = Chmod;
  ops.chown = Chown;
  ops.truncate = Truncate;
  ops.open = Open;
  ops.read = Read;
  ops.write = Write;
  ops.statfs = StatFs;
  ops.flush = Flush;
  ops.release = Release;
  ops.fsync = Fsync;
  ops.opendir = OpenDir;
  ops.readdir = ReadDir;
  ops.releasedir = ReleaseDir;
  ops.fsyncdir = FsyncDir;
  ops.init = Init;
  ops.access = Access;
  ops.create = Create;
  ops.utimens = Utimens;
  ops.fallocate = Fallocate;
  return ops;
}

// Waits for SIGUSR1 (blocked in every thread), then cuts the power: the
// journal undoes what was not durable, the report goes to stdout, the mount
// is detached and the process ends without answering pending requests.
void PowerSwitch(std::string mount) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  int sig = 0;
  while (sigwait(&set, &sig) != 0 || sig != SIGUSR1) {
  }
  const PowerOffReport report = journal->PowerOff();
  const std::string json = ReportJson(report);
  fprintf(stdout, "%s\n", json.c_str());
  fflush(stdout);
  fprintf(stderr, "powerfs: power off: %s\n", json.c_str());
  fflush(stderr);
  umount2(mount.c_str(), MNT_DETACH);
  _exit(report.errors == 0 ? 0 : 2);
}

struct Flags {
  std::string backing, mount, log;
  bool lying_sync = false;
};

bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--backing" && has_value) {
      flags->backing = argv[++i];
    } else if (arg == "--mount" && has_value) {
      flags->mount = argv[++i];
    } else if (arg == "--log" && has_value) {
      flags->log = argv[++i];
    } else if (arg == "--lying_sync") {
      flags->lying_sync = true;
    } else {
      return false;
    }
  }
  return !flags->backing.empty() && !flags->mount.empty();
}

int Run(const Flags& flags) {
  if (!flags.log.empty() &&
      freopen(flags.log.c_str(), "a", stderr) == nullptr) {
    return 1;
  }
  char* backing = realpath(flags.backing.c_str(), nullptr);
  if (backing == nullptr) {
    fprintf(stderr, "powerfs: %s: %s\n", flags.backing.c_str(),
            strerror(errno));
    return 1;
  }
  static Journal the_journal(backing, flags.lying_sync);
  free(backing);
  journal = &the_journal;
  if (int rc = journal->Start(); rc != 0) {
    fprintf(stderr, "powerfs: cannot prepare %s: %s\n",
            journal->backing().c_str(), strerror(-rc));
    return 1;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(PowerSwitch, flags.mount).detach();

  char arg0[] = "powerfs", o[] = "-o",
       opts[] = "fsname=powerfs,subtype=powerfs";
  char* args[] = {arg0, o, opts, nullptr};
  fuse_args fargs = FUSE_ARGS_INIT(3, args);
  const fuse_operations ops = Operations();
  fuse* fs = fuse_new(&fargs, &ops, sizeof(ops), nullptr);
  if (fs == nullptr) return 1;
  if (fuse_mount(fs, flags.mount.c_str()) != 0) {
    fuse_destroy(fs);
    return 1;
  }
  fuse_set_signal_handlers(fuse_get_session(fs));
  fprintf(stderr, "powerfs: %s mounted on %s%s\n", journal->backing().c_str(),
          flags.mount.c_str(), flags.lying_sync ? " (lying sync)" : "");
  // The loop returns the signal that ended it (SIGTERM, with or without a sign)
  // after a clean stop.
  const int rc = fuse_loop_mt(fs, 0);
  fuse_remove_signal_handlers(fuse_get_session(fs));
  fuse_unmount(fs);
  fuse_destroy(fs);
  // A clean unmount: nothing is lost.
  journal->Shutdown();
  fprintf(stderr, "powerfs: unmounted cleanly (loop: %d)\n", rc);
  const int sig = rc < 0 ? -rc : rc;
  return sig == 0 || sig == SIGTERM || sig == SIGINT || sig == SIGHUP ? 0 : 1;
}

}  // namespace
}  // namespace powerfs

int main(int argc, char** argv) {
  powerfs::Flags flags;
  if (!powerfs::ParseFlags(argc, argv, &flags)) {
    fprintf(stderr,
            "usage: powerfs --backing DIR --mount DIR [--log FILE] "
            "[--lying_sync]\n");
    return 64;
  }
  return powerfs::Run(flags);
}
