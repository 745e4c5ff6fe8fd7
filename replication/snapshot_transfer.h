// Snapshots of a replicated group as our engine sees them: a short
// descriptor (the state is RocksDB, already durable up to the index), and
// the copy of a whole state from one replica to another.
//
// Thread safety: InstallSnapshot and InstallFetched must run where
// ReplicatedState::ReplaceWith may (the consensus thread);
// MakeOutgoingCheckpoint on any thread.
#ifndef DEDUP_REPLICATION_SNAPSHOT_TRANSFER_H_
#define DEDUP_REPLICATION_SNAPSHOT_TRANSFER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "replication/replicated_store.h"
#include "storage/replicated_state.h"

namespace dedup {

// What libraft stores and sends as a snapshot: "dedup-snapshot/1 INDEX TAKER".
struct SnapshotDescriptor {
  uint64_t index = 0;  // the state is durable up to this log index
  uint64_t taker = 0;  // the node that took it
};

[[nodiscard]] std::string EncodeSnapshotDescriptor(
    const SnapshotDescriptor& descriptor);
// DataLossError when malformed.
[[nodiscard]] absl::StatusOr<SnapshotDescriptor> DecodeSnapshotDescriptor(
    absl::string_view text);

// Brings `state` to at least `descriptor.index`: nothing to do when it is
// there already (a restart); otherwise fetches a checkpoint from the first
// of `sources` (client addresses) that has one and swaps it in. Blocks for
// the transfer (used at start-up; a running node fetches with
// SnapshotPrefetch). An error when no source could give one (nothing
// changed). If the swap itself fails the state is unusable: the process
// exits with code 3 (a restart recovers the data dir; see state_dir_swap.h).
// Tries every source, up to `rounds` times with `pause` between rounds: after
// a whole group lost power, the members that could send it are starting too.
[[nodiscard]] absl::Status InstallSnapshot(
    ReplicatedState* state, const SnapshotDescriptor& descriptor,
    const std::vector<std::string>& sources, const FetchCheckpointFn& fetch,
    int rounds = 1, absl::Duration pause = absl::ZeroDuration());

// Swaps in the checkpoint already fetched into state->IncomingDir(), whose
// applied index is `fetched_index` (>= descriptor.index). Exits the process
// as InstallSnapshot does if the swap fails.
void InstallFetched(ReplicatedState* state,
                    const SnapshotDescriptor& descriptor,
                    uint64_t fetched_index);

// A checkpoint of `state` for another node, in `root`/`name` (created;
// `root` is on the state's file system so files are hard links).
[[nodiscard]] absl::StatusOr<OutgoingCheckpoint> MakeOutgoingCheckpoint(
    ReplicatedState* state, const std::string& root, const std::string& name);

}  // namespace dedup

#endif  // DEDUP_REPLICATION_SNAPSHOT_TRANSFER_H_
