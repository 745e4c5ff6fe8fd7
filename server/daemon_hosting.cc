// Daemon::Host and Daemon::Drop: replicas opened and closed while the node
// serves (Cluster.HostGroup / DropGroup, run by Cluster.MoveReplica).
#include "server/daemon_hosting.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "server/cluster_config.h"
#include "server/cluster_service_peers.h"
#include "server/daemon.h"
#include "storage/durable_dir.h"

namespace dedup {
namespace {

namespace fs = std::filesystem;

constexpr char kDropping[] = ".dropping";

// How long a replica's removal waits for operations still routing to it.
constexpr absl::Duration kQuiesce = absl::Seconds(5);

absl::Status SyncDir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open ", dir.string(), ": ", std::strerror(errno)));
  }
  const int rv = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rv != 0) {
    return absl::UnavailableError(absl::StrCat("cannot fsync ", dir.string(),
                                               ": ", std::strerror(saved)));
  }
  return absl::OkStatus();
}

// The directories of a group, the one whose presence means "hosted" first,
// and the directory holding them.
std::vector<fs::path> DirsOf(const std::string& data_dir, uint32_t group_id) {
  const fs::path dir(GroupDir(data_dir, group_id));
  if (group_id == 0) {
    return {dir / "raft", dir / "state", dir / "state.outgoing"};
  }
  return {dir};
}

fs::path ParentOf(const std::string& data_dir, uint32_t group_id) {
  return group_id == 0 ? fs::path(data_dir) : fs::path(data_dir) / "groups";
}

}  // namespace

absl::Status RemoveGroupDirsDurably(const std::string& data_dir,
                                    uint32_t group_id) {
  std::error_code ec;
  std::vector<fs::path> renamed;
  for (const fs::path& dir : DirsOf(data_dir, group_id)) {
    if (!fs::exists(dir, ec)) continue;
    fs::path away = dir;
    away += kDropping;
    fs::remove_all(away, ec);
    fs::rename(dir, away, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot rename ", dir.string(), ": ", ec.message()));
    }
    renamed.push_back(std::move(away));
  }
  const fs::path parent = ParentOf(data_dir, group_id);
  if (absl::Status s = SyncDir(parent); !s.ok()) return s;
  for (const fs::path& away : renamed) {
    fs::remove_all(away, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot delete ", away.string(), ": ", ec.message()));
    }
  }
  return SyncDir(parent);
}

void RemoveDroppedLeftovers(const std::string& data_dir) {
  std::error_code ec;
  for (const fs::path& parent :
       {fs::path(data_dir), fs::path(data_dir) / "groups"}) {
    for (fs::directory_iterator it(parent, ec), end; !ec && it != end;
         it.increment(ec)) {
      if (absl::EndsWith(it->path().filename().string(), kDropping)) {
        LogInfo("removing ", it->path().string(),
                " (a replica's deletion cut short)");
        fs::remove_all(it->path(), ec);
      }
    }
    ec.clear();
  }
}

absl::Status ClearUnhostedGroupDirs(const std::string& data_dir,
                                    uint32_t group_id) {
  std::error_code ec;
  for (const fs::path& dir : DirsOf(data_dir, group_id)) {
    fs::remove_all(dir, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot clear ", dir.string(), ": ", ec.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Daemon::Host(uint32_t group_id) {
  absl::MutexLock lock(&hosting_mu_);
  if (router_ == nullptr) {
    return absl::FailedPreconditionError("hosting needs --groups > 1");
  }
  if (directory_->Hosted(group_id) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("node ", cluster_.node_id, " hosts group ", group_id));
  }
  absl::StatusOr<ClusterStoreOptions> options = cluster_.open_group(group_id);
  if (!options.ok()) return options.status();
  if (group_id == 0) options->shard_map_changed = ShardMapChanged();
  const std::string& data = config_.store.path;
  if (absl::Status s = ClearUnhostedGroupDirs(data, group_id); !s.ok()) {
    return s;
  }
  // The raft dir, durable, is what makes a restart reopen the replica.
  if (absl::Status s = CreateDirectoriesDurably(options->raft.dir); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::unique_ptr<ReplicatedStore>> opened =
      ReplicatedStore::Open(*options);
  if (!opened.ok()) {
    RemoveGroupDirsDurably(data, group_id).IgnoreError();
    return absl::Status(opened.status().code(),
                        absl::StrCat("opening a replica of group ", group_id,
                                     ": ", opened.status().message()));
  }
  directory_->Host(group_id, opened->get());
  owned_groups_.push_back(*std::move(opened));
  joining_.insert(group_id);
  LogInfo("group ", group_id,
          ": hosting an empty replica, waiting for the leader to add it");
  return absl::OkStatus();
}

void Daemon::ActivateJoined() {
  absl::MutexLock lock(&hosting_mu_);
  for (auto it = joining_.begin(); it != joining_.end();) {
    ReplicatedStore* store = directory_->Hosted(*it);
    if (store == nullptr) {
      it = joining_.erase(it);
      continue;
    }
    const ConsensusStatus status = store->GetClusterStatus().consensus;
    bool voter = false;
    for (const Member& m : status.members) {
      voter |= m.id == cluster_.node_id && m.role == MemberRole::kVoter;
    }
    if (!voter || status.leader_id == 0) {
      ++it;
      continue;
    }
    if (absl::Status s = router_->AddHosted(*it, store); !s.ok()) {
      LogWarning("group ", *it, ": ", s.message());
    } else {
      LogInfo("group ", *it, ": a voter now, serving its keys");
    }
    it = joining_.erase(it);
  }
}

absl::Status Daemon::Drop(uint32_t group_id) {
  absl::MutexLock lock(&hosting_mu_);
  if (router_ == nullptr) {
    return absl::FailedPreconditionError("hosting needs --groups > 1");
  }
  ReplicatedStore* store = directory_->Hosted(group_id);
  if (store == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "node ", cluster_.node_id, " hosts no replica of group ", group_id));
  }
  // The leader's word, not this replica's: a removed node may never
  // receive the entry that removed it.
  std::vector<NodeAt> others;
  for (const ClusterNode& peer : cluster_.peers) {
    if (peer.id != cluster_.node_id) {
      others.push_back({peer.id, peer.client_address});
    }
  }
  absl::StatusOr<v1::ClusterStatusResponse> leader =
      FindGroupLeader(cluster_.open_peer, others, group_id, absl::Seconds(10));
  if (!leader.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot tell whether group ", group_id, " still lists node ",
        cluster_.node_id, ": ", leader.status().message()));
  }
  if (!RoleOf(*leader, cluster_.node_id).empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", cluster_.node_id, " is still a member of group ",
                     group_id, " (its leader is node ", leader->node_id(),
                     "): remove it first (Cluster.RemoveNode)"));
  }
  return CloseAndDelete(group_id, store, *leader);
}

absl::Status Daemon::CloseAndDelete(uint32_t group_id, ReplicatedStore* store,
                                    const v1::ClusterStatusResponse& leader) {
  directory_->Unhost(group_id, VotersOf(leader), leader.node_id());
  joining_.erase(group_id);
  if (absl::Status s = router_->RemoveHosted(group_id, kQuiesce);
      !s.ok() && s.code() != absl::StatusCode::kNotFound) {
    LogWarning("group ", group_id, ": ", s.message());
  }
  if (absl::Status s = store->Close(); !s.ok()) {
    LogWarning("group ", group_id, ": closing the replica: ", s.message());
  }
  for (auto it = owned_groups_.begin(); it != owned_groups_.end(); ++it) {
    if (it->get() == store) {
      retired_groups_.push_back(std::move(*it));
      owned_groups_.erase(it);
      break;
    }
  }
  if (absl::Status s = RemoveGroupDirsDurably(config_.store.path, group_id);
      !s.ok()) {
    return s;
  }
  LogInfo("group ", group_id, ": replica closed and deleted (node ",
          cluster_.node_id, " was removed from the group)");
  return absl::OkStatus();
}

}  // namespace dedup
