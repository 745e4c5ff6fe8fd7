#include "server/checkpoint_streamer.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
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

class CheckpointStreamer final
    : public grpc::ServerWriteReactor<v1::CheckpointChunk> {
 public:
  CheckpointStreamer(ReplicatedStore* store, uint64_t min_applied_index,
                     Metrics* metrics, TaskThreads* tasks)
      : store_(store),
        min_applied_index_(min_applied_index),
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
    if (!status.ok()) {
      metrics_->RecordError(Method::kClusterFetchCheckpoint,
                            status.error_code());
    }
    metrics_->ObserveDuration(
        Method::kClusterFetchCheckpoint,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
            .count());
    metrics_->CallFinished();
    Finish(status);
  }

  grpc::Status Stream() {
    absl::StatusOr<OutgoingCheckpoint> checkpoint =
        store_->CreateOutgoingCheckpoint();
    if (!checkpoint.ok()) return ToGrpcStatus(checkpoint.status());
    grpc::Status status = StreamDir(*checkpoint);
    std::error_code ec;
    fs::remove_all(checkpoint->dir, ec);
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
        chunk_.Clear();
        chunk_.set_applied_index(checkpoint.applied_index);
        chunk_.set_file_name(path.filename().string());
        chunk_.set_file_size(size);
        chunk_.set_offset(offset);
        chunk_.set_data(buffer.data(), n);
        if (!Write()) {
          return grpc::Status(grpc::StatusCode::CANCELLED,
                              "the receiver went away");
        }
        offset += n;
      } while (offset < size);
    }
    return grpc::Status::OK;
  }

  // Sends chunk_ and waits until gRPC is done with it; false when the call
  // broke.
  bool Write() {
    {
      absl::MutexLock lock(&mu_);
      if (broken_) return false;
      writing_ = true;
    }
    StartWrite(&chunk_);
    absl::MutexLock lock(&mu_);
    auto settled = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !writing_ || broken_;
    };
    mu_.Await(absl::Condition(&settled));
    // A write still pending when the call broke completes (with ok=false)
    // before OnDone; chunk_ must outlive it, which it does (Finish follows).
    return !broken_;
  }

  ReplicatedStore* const store_;
  const uint64_t min_applied_index_;
  Metrics* const metrics_;
  const std::chrono::steady_clock::time_point start_;
  v1::CheckpointChunk chunk_;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<v1::CheckpointChunk>* StartCheckpointStream(
    ReplicatedStore* store, uint64_t min_applied_index, Metrics* metrics,
    TaskThreads* tasks) {
  return new CheckpointStreamer(store, min_applied_index, metrics, tasks);
}

}  // namespace dedup
