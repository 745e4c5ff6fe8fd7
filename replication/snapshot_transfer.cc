#include "replication/snapshot_transfer.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"
#include "common/log.h"

namespace dedup {
namespace {

constexpr char kDescriptorTag[] = "dedup-snapshot/1";

// Exit code of a node whose state could not be replaced by a snapshot it
// fetched (the data dir's own error code: a restart recovers it).
constexpr int kExitSnapshotInstall = exit_code::kDataDir;

void RemoveDir(const std::string& dir) {
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

// Makes the checkpoint in the incoming directory the state.
void SwapIn(ReplicatedState* state, const SnapshotDescriptor& descriptor) {
  if (absl::Status s = state->ReplaceWith(state->IncomingDir()); !s.ok()) {
    // The old state is closed and maybe moved: nothing can be applied.
    // LogError flushes: the line is out before _exit.
    LogError("FATAL: installing the snapshot at index ", descriptor.index,
             " failed: ", s.message(),
             "; stopping (a restart recovers the data dir)");
    _exit(kExitSnapshotInstall);
  }
}

}  // namespace

std::string EncodeSnapshotDescriptor(const SnapshotDescriptor& descriptor) {
  return absl::StrCat(kDescriptorTag, " ", descriptor.index, " ",
                      descriptor.taker);
}

absl::StatusOr<SnapshotDescriptor> DecodeSnapshotDescriptor(
    absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ' ');
  SnapshotDescriptor out;
  if (parts.size() != 3 || parts[0] != kDescriptorTag ||
      !absl::SimpleAtoi(parts[1], &out.index) ||
      !absl::SimpleAtoi(parts[2], &out.taker)) {
    return absl::DataLossError("snapshot descriptor is malformed");
  }
  return out;
}

absl::Status InstallSnapshot(ReplicatedState* state,
                             const SnapshotDescriptor& descriptor,
                             const std::vector<std::string>& sources,
                             const FetchCheckpointFn& fetch, int rounds,
                             absl::Duration pause) {
  // This node's own snapshot at a restart, or one it already has.
  if (state->applied_index() >= descriptor.index) return absl::OkStatus();
  if (!fetch) {
    return absl::UnimplementedError(absl::StrCat(
        "this node's state is at index ", state->applied_index(),
        " and needs the snapshot at index ", descriptor.index, " from node ",
        descriptor.taker, ", but it has no way to fetch one"));
  }
  absl::Status last = absl::UnavailableError("no member to fetch from");
  const std::string incoming = state->IncomingDir();
  for (int round = 1; round <= rounds; ++round) {
    if (round > 1) {
      LogWarning("snapshot ", descriptor.index, ": no member could send it; ",
                 "trying again in ", absl::FormatDuration(pause), " (round ",
                 round, " of ", rounds, ")");
      absl::SleepFor(pause);
    }
    for (const std::string& address : sources) {
      RemoveDir(incoming);
      absl::StatusOr<uint64_t> fetched =
          fetch(address, descriptor.index, incoming, nullptr);
      if (!fetched.ok()) {
        last = fetched.status();
        LogWarning("snapshot ", descriptor.index, " from ", address, ": ",
                   last.message());
        RemoveDir(incoming);
        continue;
      }
      SwapIn(state, descriptor);
      LogInfo("installed a snapshot from ", address, " at index ", *fetched,
              " (needed ", descriptor.index, ")");
      return absl::OkStatus();
    }
  }
  return last;
}

void InstallFetched(ReplicatedState* state,
                    const SnapshotDescriptor& descriptor,
                    uint64_t fetched_index) {
  SwapIn(state, descriptor);
  LogInfo("installed a snapshot at index ", fetched_index, " (needed ",
          descriptor.index, ")");
}

absl::StatusOr<OutgoingCheckpoint> MakeOutgoingCheckpoint(
    ReplicatedState* state, const std::string& root, const std::string& name) {
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", root, ": ", ec.message()));
  }
  OutgoingCheckpoint out;
  out.dir = absl::StrCat(root, "/", name);
  RemoveDir(out.dir);
  absl::StatusOr<uint64_t> applied = state->Checkpoint(out.dir);
  if (!applied.ok()) {
    RemoveDir(out.dir);
    return applied.status();
  }
  out.applied_index = *applied;
  return out;
}

}  // namespace dedup
