#include "storage/durable_marker.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/state_dir_swap.h"

namespace dedup {
namespace {

constexpr char kHeader[] = "dedup-durable v1";
constexpr char kExplanation[] =
    "# Written by dedupd after each WAL sync: writes up to this RocksDB\n"
    "# sequence number were acknowledged. Delete this file only to start a\n"
    "# damaged data dir anyway, accepting the loss of acknowledged writes.\n";

// FNV-1a: enough to tell a torn or edited line from a written one.
uint64_t Check(const std::string& text) {
  uint64_t hash = 1469598103934665603ULL;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  return hash;
}

std::string MarkLine(const DurableMark& mark) {
  // Fixed-width numbers: every version of the file has the same size, so an
  // update overwrites the whole of the previous one.
  return absl::StrFormat("%s sequence=%020u wal=%020u wal_bytes=%020u", kHeader,
                         mark.sequence, mark.wal_number, mark.wal_bytes);
}

bool Below(const DurableMark& a, const DurableMark& b) {
  return a.sequence < b.sequence ||
         (a.sequence == b.sequence && a.wal_number < b.wal_number) ||
         (a.sequence == b.sequence && a.wal_number == b.wal_number &&
          a.wal_bytes < b.wal_bytes);
}

}  // namespace

std::string EncodeDurableMark(const DurableMark& mark) {
  const std::string line = MarkLine(mark);
  return absl::StrFormat("%s check=%016x\n%s", line, Check(line), kExplanation);
}

std::optional<DurableMark> DecodeDurableMark(const std::string& text) {
  DurableMark mark;
  uint64_t check = 0;
  int consumed = 0;
  if (std::sscanf(text.c_str(),
                  "dedup-durable v1 sequence=%20" SCNu64 " wal=%20" SCNu64
                  " wal_bytes=%20" SCNu64 " check=%16" SCNx64 "%n",
                  &mark.sequence, &mark.wal_number, &mark.wal_bytes, &check,
                  &consumed) != 4) {
    return std::nullopt;
  }
  if (Check(MarkLine(mark)) != check) return std::nullopt;
  return mark;
}

absl::StatusOr<std::optional<DurableMark>> DurableMarker::Read(
    const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kDurableMarkerName);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (access(path.c_str(), F_OK) != 0 && errno == ENOENT) {
      return std::optional<DurableMark>();
    }
    return absl::DataLossError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::optional<DurableMark> mark = DecodeDurableMark(text.str());
  if (!mark.has_value()) {
    return absl::DataLossError(absl::StrCat(
        path,
        " is damaged (it should record the last durable write). Restore "
        "the data dir from a backup or a replica; to start with the data "
        "as it is, accepting the loss of acknowledged writes, delete ",
        path));
  }
  return mark;
}

absl::StatusOr<std::unique_ptr<DurableMarker>> DurableMarker::Create(
    const std::string& dir, const DurableMark& initial) {
  const std::string path = absl::StrCat(dir, "/", kDurableMarkerName);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<DurableMarker> marker(new DurableMarker(path, fd, initial));
  {
    absl::MutexLock lock(&marker->mu_);
    marker->WriteLocked(initial);
  }
  if (absl::Status s = marker->Sync(); !s.ok()) return s;
  // The file itself must survive a crash: it says the dir has a database.
  if (absl::Status s = SyncPath(dir); !s.ok()) return s;
  return marker;
}

DurableMarker::~DurableMarker() { close(fd_); }

void DurableMarker::Update(const DurableMark& mark) {
  absl::MutexLock lock(&mu_);
  if (Below(mark, last_)) return;
  WriteLocked(mark);
}

void DurableMarker::WriteLocked(const DurableMark& mark) {
  const std::string text = EncodeDurableMark(mark);
  // One write of a few hundred bytes at offset 0: within one disk sector,
  // so it lands whole or not at all.
  if (pwrite(fd_, text.data(), text.size(), 0) ==
      static_cast<ssize_t>(text.size())) {
    last_ = mark;
  }
}

absl::Status DurableMarker::Sync() {
  if (fdatasync(fd_) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot sync ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

DurableMark DurableMarker::last() const {
  absl::MutexLock lock(&mu_);
  return last_;
}

}  // namespace dedup
