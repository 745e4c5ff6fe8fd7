#include "server/checkpoint_fetch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "dedup/v1/cluster.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "storage/state_dir_swap.h"

namespace dedup {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// One file of the copy, written in order and synced when closed.
class FileWriter {
 public:
  ~FileWriter() {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Open(const std::string& path, uint64_t size) {
    path_ = path;
    size_ = size;
    written_ = 0;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) return Errno("cannot create", path);
    return absl::OkStatus();
  }

  bool open() const { return fd_ >= 0; }
  uint64_t written() const { return written_; }
  uint64_t size() const { return size_; }

  absl::Status Append(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Errno("cannot write", path_);
      }
      done += static_cast<size_t>(n);
    }
    written_ += data.size();
    return absl::OkStatus();
  }

  absl::Status Close() {
    if (written_ != size_) {
      return absl::DataLossError(absl::StrCat(path_, ": received ", written_,
                                              " of ", size_, " bytes"));
    }
    const int fd = fd_;
    fd_ = -1;
    if (::fsync(fd) != 0) {
      ::close(fd);
      return Errno("cannot fsync", path_);
    }
    if (::close(fd) != 0) return Errno("cannot close", path_);
    return absl::OkStatus();
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t written_ = 0;
};

bool PlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// Cancels a call that stops making progress, runs past its total time or
// is cancelled by its caller. Its thread wakes a few times a second.
class FetchWatchdog {
 public:
  FetchWatchdog(grpc::ClientContext* context, const FetchLimits& limits,
                const std::atomic<bool>* cancelled)
      : context_(context),
        limits_(limits),
        cancelled_(cancelled),
        start_(absl::Now()),
        last_progress_(start_),
        thread_([this] { Watch(); }) {}

  ~FetchWatchdog() { Stop(); }

  void Progress() {
    absl::MutexLock lock(&mu_);
    last_progress_ = absl::Now();
  }

  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

  // Why the call was cancelled; empty if it was not.
  std::string reason() const {
    absl::MutexLock lock(&mu_);
    return reason_;
  }

 private:
  void Watch() {
    const absl::Duration period =
        std::min(absl::Milliseconds(100), limits_.stall / 4);
    absl::MutexLock lock(&mu_);
    while (!stopping_) {
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), period);
      if (stopping_) return;
      const absl::Time now = absl::Now();
      if (cancelled_ != nullptr && cancelled_->load()) {
        reason_ = "cancelled";
      } else if (now - last_progress_ > limits_.stall) {
        reason_ = absl::StrCat("no data for ",
                               absl::FormatDuration(now - last_progress_));
      } else if (now - start_ > limits_.total) {
        reason_ = absl::StrCat("not done after ",
                               absl::FormatDuration(limits_.total));
      } else {
        continue;
      }
      context_->TryCancel();
      return;
    }
  }

  grpc::ClientContext* const context_;
  const FetchLimits limits_;
  const std::atomic<bool>* const cancelled_;
  const absl::Time start_;
  mutable absl::Mutex mu_;
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts once the rest is set
};

// Group id -> bytes of checkpoint files received since the process started.
absl::Mutex fetched_mu(absl::kConstInit);
std::map<uint32_t, uint64_t>& FetchedBytes()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(fetched_mu) {
  static auto* fetched = new std::map<uint32_t, uint64_t>();
  return *fetched;
}

void CountFetched(uint32_t group_id, uint64_t bytes) {
  absl::MutexLock lock(&fetched_mu);
  FetchedBytes()[group_id] += bytes;
}

// Writes the stream's chunks as files of `dir`, in order.
absl::Status ReadChunks(grpc::ClientReader<v1::CheckpointChunk>& reader,
                        const std::string& dir, uint32_t group_id,
                        FetchWatchdog& watchdog, FileWriter& file,
                        uint64_t& applied_index) {
  v1::CheckpointChunk chunk;
  std::string name;
  while (reader.Read(&chunk)) {
    watchdog.Progress();
    CountFetched(group_id, chunk.data().size());
    if (chunk.offset() == 0) {
      if (file.open()) {
        if (absl::Status s = file.Close(); !s.ok()) return s;
      }
      if (!PlainFileName(chunk.file_name())) {
        return absl::DataLossError(
            absl::StrCat("bad file name '", chunk.file_name(), "'"));
      }
      name = chunk.file_name();
      applied_index = chunk.applied_index();
      absl::Status s =
          file.Open(absl::StrCat(dir, "/", name), chunk.file_size());
      if (!s.ok()) return s;
    } else if (!file.open() || chunk.file_name() != name ||
               chunk.offset() != file.written() ||
               chunk.applied_index() != applied_index) {
      return absl::DataLossError(absl::StrCat(
          "chunk out of order: ", chunk.file_name(), " at ", chunk.offset()));
    }
    if (chunk.offset() + chunk.data().size() > file.size()) {
      return absl::DataLossError(
          absl::StrCat(name, ": more bytes than its size ", file.size()));
    }
    if (absl::Status s = file.Append(chunk.data()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t CheckpointBytesFetched(uint32_t group_id) {
  absl::MutexLock lock(&fetched_mu);
  auto it = FetchedBytes().find(group_id);
  return it == FetchedBytes().end() ? 0 : it->second;
}

absl::StatusOr<uint64_t> FetchCheckpoint(
    const ChannelFactory& open, const std::string& address, uint32_t group_id,
    uint64_t min_applied_index, const std::string& dir,
    const FetchLimits& limits, const std::atomic<bool>* cancelled) {
  if (::mkdir(dir.c_str(), 0755) != 0) return Errno("cannot create", dir);
  auto stub = v1::Cluster::NewStub(open(address));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + limits.total));
  v1::FetchCheckpointRequest request;
  request.set_min_applied_index(min_applied_index);
  request.set_group_id(group_id);
  FetchWatchdog watchdog(&context, limits, cancelled);
  std::unique_ptr<grpc::ClientReader<v1::CheckpointChunk>> reader =
      stub->FetchCheckpoint(&context, request);
  FileWriter file;
  uint64_t applied_index = 0;
  absl::Status failed =
      ReadChunks(*reader, dir, group_id, watchdog, file, applied_index);
  if (!failed.ok()) {
    context.TryCancel();
    (void)reader->Finish();
    return failed;
  }
  const grpc::Status status = reader->Finish();
  watchdog.Stop();
  if (!status.ok()) {
    const std::string why = watchdog.reason();
    return absl::UnavailableError(
        absl::StrCat("fetching a checkpoint from ", address, ": ",
                     why.empty() ? status.error_message() : why, " (code ",
                     static_cast<int>(status.error_code()), ")"));
  }
  if (!file.open()) {
    return absl::DataLossError(
        absl::StrCat("the checkpoint from ", address, " was empty"));
  }
  if (absl::Status s = file.Close(); !s.ok()) return s;
  if (absl::Status s = SyncPath(dir); !s.ok()) return s;
  if (applied_index < min_applied_index) {
    return absl::DataLossError(absl::StrCat("the checkpoint from ", address,
                                            " is at index ", applied_index,
                                            ", before ", min_applied_index));
  }
  return applied_index;
}

}  // namespace dedup
