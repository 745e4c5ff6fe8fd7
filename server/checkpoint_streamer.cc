#include "server/checkpoint_streamer.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/proto_convert.h"

namespace dedup {
namespace {

namespace fs = std::filesystem;

// Bytes per message: well under gRPC's default 4 MiB receive limit.
constexpr size_t kChunkBytes = 1 << 20;

// The chunk of a file inside a stream's message.
v1::CheckpointChunk* FileChunk(v1::CheckpointChunk& message) {
  return &message;
}
v1::CheckpointChunk* FileChunk(v1::BackupChunk& message) {
  return message.mutable_file();
}

// What a stream sends: a checkpoint, after an optional message of its own.
template <typename Message>
struct MadeCheckpoint {
  OutgoingCheckpoint checkpoint;
  std::optional<Message> preface;
};

template <typename Message>
using MakeFn = std::function<absl::StatusOr<MadeCheckpoint<Message>>()>;

template <typename Message>
class CheckpointStreamer final : public grpc::ServerWriteReactor<Message> {
 public:
  CheckpointStreamer(MakeFn<Message> make, uint64_t min_applied_index,
                     Method method, absl::AnyInvocable<void() &&> done,
                     Metrics* metrics, TaskThreads* tasks)
      : make_(std::move(make)),
        min_applied_index_(min_applied_index),
        method_(method),
        done_(std::move(done)),
        metrics_(metrics),
        start_(std::chrono::steady_clock::now()) {
    metrics_->CallStarted();
    tasks->Start([this] { Run(); });
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    if (!ok) broken_ = true;
    writing_ = false;
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    broken_ = true;
  }

  void OnDone() override { delete this; }

 private:
  // The call's own thread. Finish is the last thing it does with `this`.
  void Run() {
    grpc::Status status = Stream();
    if (done_) std::move(done_)();
    if (!status.ok()) metrics_->RecordError(method_, status.error_code());
    metrics_->ObserveDuration(
        method_,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
            .count());
    metrics_->CallFinished();
    this->Finish(status);
  }

  grpc::Status Stream() {
    absl::StatusOr<MadeCheckpoint<Message>> made = make_();
    if (!made.ok()) return ToGrpcStatus(made.status());
    grpc::Status status = grpc::Status::OK;
    if (made->preface.has_value()) {
      message_ = *std::move(made->preface);
      if (!Write()) {
        status =
            grpc::Status(grpc::StatusCode::CANCELLED, "the receiver went away");
      }
    }
    if (status.ok()) status = StreamDir(made->checkpoint);
    std::error_code ec;
    fs::remove_all(made->checkpoint.dir, ec);
    return status;
  }

  grpc::Status StreamDir(const OutgoingCheckpoint& checkpoint) {
    if (checkpoint.applied_index < min_applied_index_) {
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("this node's state is at index ",
                       checkpoint.applied_index, ", behind the requested ",
                       min_applied_index_, "; ask another node"));
    }
    std::vector<fs::path> files;
    std::error_code ec;
    for (const fs::directory_entry& entry :
         fs::directory_iterator(checkpoint.dir, ec)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
    if (ec) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat("cannot list checkpoint ",
                                       checkpoint.dir, ": ", ec.message()));
    }
    std::sort(files.begin(), files.end());
    std::string buffer(kChunkBytes, '\0');
    for (const fs::path& path : files) {
      std::ifstream in(path, std::ios::binary);
      const uint64_t size = fs::file_size(path, ec);
      if (!in || ec) {
        return grpc::Status(grpc::StatusCode::INTERNAL,
                            absl::StrCat("cannot read ", path.string()));
      }
      uint64_t offset = 0;
      do {
        const size_t n =
            static_cast<size_t>(std::min<uint64_t>(kChunkBytes, size - offset));
        if (n > 0 && !in.read(buffer.data(), static_cast<std::streamsize>(n))) {
          return grpc::Status(grpc::StatusCode::INTERNAL,
                              absl::StrCat("cannot read ", path.string()));
        }
        message_.Clear();
        v1::CheckpointChunk* chunk = FileChunk(message_);
        chunk->set_applied_index(checkpoint.applied_index);
        chunk->set_file_name(path.filename().string());
        chunk->set_file_size(size);
        chunk->set_offset(offset);
        chunk->set_data(buffer.data(), n);
        if (!Write()) {
          return grpc::Status(grpc::StatusCode::CANCELLED,
                              "the receiver went away");
        }
        offset += n;
      } while (offset < size);
    }
    return grpc::Status::OK;
  }

  // Sends message_ and waits until gRPC is done with it; false when the call
  // broke.
  bool Write() {
    {
      absl::MutexLock lock(&mu_);
      if (broken_) return false;
      writing_ = true;
    }
    this->StartWrite(&message_);
    absl::MutexLock lock(&mu_);
    auto settled = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !writing_ || broken_;
    };
    mu_.Await(absl::Condition(&settled));
    // A write still pending when the call broke completes (with ok=false)
    // before OnDone; message_ must outlive it, which it does (Finish
    // follows).
    return !broken_;
  }

  const MakeFn<Message> make_;
  const uint64_t min_applied_index_;
  const Method method_;
  absl::AnyInvocable<void() &&> done_;
  Metrics* const metrics_;
  const std::chrono::steady_clock::time_point start_;
  Message message_;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<v1::CheckpointChunk>* StartCheckpointStream(
    ReplicatedStore* store, uint64_t min_applied_index, Metrics* metrics,
    TaskThreads* tasks) {
  MakeFn<v1::CheckpointChunk> make =
      [store]() -> absl::StatusOr<MadeCheckpoint<v1::CheckpointChunk>> {
    absl::StatusOr<OutgoingCheckpoint> checkpoint =
        store->CreateOutgoingCheckpoint();
    if (!checkpoint.ok()) return checkpoint.status();
    return MadeCheckpoint<v1::CheckpointChunk>{*std::move(checkpoint),
                                               std::nullopt};
  };
  return new CheckpointStreamer<v1::CheckpointChunk>(
      std::move(make), min_applied_index, Method::kClusterFetchCheckpoint,
      nullptr, metrics, tasks);
}

grpc::ServerWriteReactor<v1::BackupChunk>* StartBackupStream(
    MakeBackupFn make, absl::AnyInvocable<void() &&> done, Metrics* metrics,
    TaskThreads* tasks) {
  MakeFn<v1::BackupChunk> made = [make = std::move(make)]()
      -> absl::StatusOr<MadeCheckpoint<v1::BackupChunk>> {
    v1::BackupChunk info;
    absl::StatusOr<OutgoingCheckpoint> checkpoint = make(info.mutable_info());
    if (!checkpoint.ok()) return checkpoint.status();
    return MadeCheckpoint<v1::BackupChunk>{*std::move(checkpoint),
                                           std::move(info)};
  };
  return new CheckpointStreamer<v1::BackupChunk>(
      std::move(made), 0, Method::kAdminBackup, std::move(done), metrics,
      tasks);
}

}  // namespace dedup
