#include "server/checkpoint_fetch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
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

}  // namespace

absl::StatusOr<uint64_t> FetchCheckpoint(const ChannelFactory& open,
                                         const std::string& address,
                                         uint64_t min_applied_index,
                                         const std::string& dir,
                                         absl::Duration timeout) {
  if (::mkdir(dir.c_str(), 0755) != 0) return Errno("cannot create", dir);
  auto stub = v1::Cluster::NewStub(open(address));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::FetchCheckpointRequest request;
  request.set_min_applied_index(min_applied_index);
  std::unique_ptr<grpc::ClientReader<v1::CheckpointChunk>> reader =
      stub->FetchCheckpoint(&context, request);
  v1::CheckpointChunk chunk;
  FileWriter file;
  std::string name;
  uint64_t applied_index = 0;
  absl::Status failed;
  while (failed.ok() && reader->Read(&chunk)) {
    if (chunk.offset() == 0) {
      if (file.open()) failed = file.Close();
      if (!failed.ok()) break;
      if (!PlainFileName(chunk.file_name())) {
        failed = absl::DataLossError(
            absl::StrCat("bad file name '", chunk.file_name(), "'"));
        break;
      }
      name = chunk.file_name();
      applied_index = chunk.applied_index();
      failed = file.Open(absl::StrCat(dir, "/", name), chunk.file_size());
      if (!failed.ok()) break;
    } else if (!file.open() || chunk.file_name() != name ||
               chunk.offset() != file.written() ||
               chunk.applied_index() != applied_index) {
      failed = absl::DataLossError(absl::StrCat(
          "chunk out of order: ", chunk.file_name(), " at ", chunk.offset()));
      break;
    }
    if (chunk.offset() + chunk.data().size() > file.size()) {
      failed = absl::DataLossError(
          absl::StrCat(name, ": more bytes than its size ", file.size()));
      break;
    }
    failed = file.Append(chunk.data());
  }
  if (!failed.ok()) {
    context.TryCancel();
    (void)reader->Finish();
    return failed;
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "fetching a checkpoint from ", address, ": ", status.error_message(),
        " (code ", static_cast<int>(status.error_code()), ")"));
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
