// Streams a fresh checkpoint of this node's data, file by file: to a node
// installing a snapshot (dedup.v1.Cluster/FetchCheckpoint) and to an
// operator's backup (dedup.v1.Admin/Backup), which is the same stream with
// one message of its own in front.
#ifndef DEDUP_SERVER_CHECKPOINT_STREAMER_H_
#define DEDUP_SERVER_CHECKPOINT_STREAMER_H_

#include <cstdint>
#include <functional>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "dedup/v1/admin.grpc.pb.h"
#include "dedup/v1/cluster.grpc.pb.h"
#include "replication/replicated_store.h"
#include "server/metrics.h"
#include "server/task_threads.h"

namespace dedup {

// Starts streaming a checkpoint that covers at least `min_applied_index`.
// The checkpoint is made and read on a thread of the call's own (RocksDB
// flushes and file reads never block gRPC's callback threads), one chunk in
// flight at a time; the copy is deleted when the call ends. `store` must
// outlive the call, and so must `metrics` (the stream counts as a call in
// flight until it ends, then its duration and error are recorded under
// Cluster.FetchCheckpoint) and `tasks` (runs the thread). The reactor deletes
// itself when done.
grpc::ServerWriteReactor<v1::CheckpointChunk>* StartCheckpointStream(
    ReplicatedStore* store, uint64_t min_applied_index, Metrics* metrics,
    TaskThreads* tasks);

// Makes a backup's checkpoint (blocking, on the stream's thread) and fills
// the info sent before its files. The stream removes the checkpoint's
// directory when it ends.
using MakeBackupFn =
    std::function<absl::StatusOr<OutgoingCheckpoint>(v1::BackupInfo* info)>;

// Starts streaming a backup: `make`'s info, then the checkpoint's files as
// StartCheckpointStream sends them. Counted under Admin.Backup. `done` runs
// once the stream's thread is through with the checkpoint (before the call
// finishes). Same lifetimes as StartCheckpointStream.
grpc::ServerWriteReactor<v1::BackupChunk>* StartBackupStream(
    MakeBackupFn make, absl::AnyInvocable<void() &&> done, Metrics* metrics,
    TaskThreads* tasks);

}  // namespace dedup

#endif  // DEDUP_SERVER_CHECKPOINT_STREAMER_H_
