// Serves dedup.v1.Cluster/FetchCheckpoint: a fresh checkpoint of this node's
// replicated state, streamed file by file to a node installing a snapshot.
#ifndef DEDUP_SERVER_CHECKPOINT_STREAMER_H_
#define DEDUP_SERVER_CHECKPOINT_STREAMER_H_

#include <cstdint>

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

}  // namespace dedup

#endif  // DEDUP_SERVER_CHECKPOINT_STREAMER_H_
