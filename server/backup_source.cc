#include "server/backup_source.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "storage/format_version.h"

namespace dedup {
namespace {

void FillCommon(const BackupSource& source, const StoreStats& stats,
                v1::BackupInfo* info) {
  info->set_estimated_records(stats.estimated_records);
  info->set_format_version(storage::kDataFormatVersion);
  info->set_version(source.version);
  info->set_git_sha(source.git_sha);
  info->set_created_at_ms(source.clock->NowMillis());
}

absl::StatusOr<OutgoingCheckpoint> SingleNodeBackup(const BackupSource& source,
                                                    v1::BackupInfo* info) {
  std::error_code ec;
  std::filesystem::remove_all(source.scratch_dir, ec);  // an old one's
  if (absl::Status s = source.store->CreateCheckpoint(source.scratch_dir);
      !s.ok()) {
    std::filesystem::remove_all(source.scratch_dir, ec);
    return s;
  }
  info->set_mode("single");
  FillCommon(source, source.store->Stats(), info);
  return OutgoingCheckpoint{source.scratch_dir, 0};
}

// Every entry in the leader's log when the call started is applied here
// before the copy is made, so every write the group answered before the
// call is in it: an answered write was committed, and a leader's log holds
// every committed entry (its commit index may not cover a former leader's
// last entries yet, its log does).
absl::Status AwaitApplied(const BackupSource& source, uint64_t index) {
  const absl::Time deadline = absl::Now() + source.apply_wait;
  while (source.replicated->GetClusterStatus().state_applied_index < index) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("this node did not apply index ", index, " within ",
                       absl::FormatDuration(source.apply_wait), "; try again"));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::OkStatus();
}

absl::StatusOr<OutgoingCheckpoint> ClusterBackup(const BackupSource& source,
                                                 v1::BackupInfo* info) {
  ReplicatedStore* const store = source.replicated;
  if (absl::Status s = store->CheckServing(); !s.ok()) return s;
  const ClusterStatus status = store->GetClusterStatus();
  if (absl::Status s = AwaitApplied(
          source,
          std::max(status.consensus.commit_index, status.consensus.last_index));
      !s.ok()) {
    return s;
  }
  absl::StatusOr<OutgoingCheckpoint> checkpoint =
      store->CreateOutgoingCheckpoint();
  if (!checkpoint.ok()) return checkpoint.status();
  info->set_mode("cluster");
  info->set_node_id(status.consensus.id);
  info->set_applied_index(checkpoint->applied_index);
  info->set_term(status.consensus.term);
  for (const Member& member : status.consensus.members) {
    v1::ClusterMember* out = info->add_members();
    out->set_id(member.id);
    out->set_raft_address(member.raft_address);
    for (const ClusterNode& node : status.nodes) {
      if (node.id == member.id) out->set_client_address(node.client_address);
    }
    out->set_role(MemberRoleName(member.role));
  }
  FillCommon(source, store->Stats(), info);
  return checkpoint;
}

}  // namespace

absl::StatusOr<OutgoingCheckpoint> MakeBackup(const BackupSource& source,
                                              v1::BackupInfo* info) {
  if (!source.refusal.empty()) {
    return absl::FailedPreconditionError(source.refusal);
  }
  if (source.replicated != nullptr) return ClusterBackup(source, info);
  return SingleNodeBackup(source, info);
}

}  // namespace dedup
