#include "server/recovery.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "dedup/v1/cluster.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "replication/raft_dir_repair.h"
#include "server/exit_status.h"
#include "storage/durable_dir.h"
#include "storage/replicated_state.h"

ABSL_FLAG(bool, recover_as_sole_voter, false,
          "cluster mode, disaster recovery of a group that lost its majority "
          "for good: before starting, force this node's configuration to "
          "itself as the only voter, then add fresh members with `dedupctl "
          "cluster add`. Refused (exit code 7) when a reachable member knows "
          "a leader or has a more up-to-date log, and once members were added "
          "after a previous recovery (delete DATA_DIR/recovered_as_sole_voter "
          "to recover again); does nothing when this node is already the only "
          "voter (README: Disaster recovery)");
ABSL_FLAG(bool, recover_even_if_behind, false,
          "with --recover_as_sole_voter: recover even when a reachable "
          "member's log is ahead of this node's (what only that member holds "
          "is lost, acknowledged writes included)");

namespace dedup {
namespace {

constexpr auto kStatusTimeout = std::chrono::seconds(2);
constexpr auto kWatchPoll = std::chrono::milliseconds(200);
constexpr char kRecoveryMarker[] = "recovered_as_sole_voter";

std::filesystem::path MarkerPath(const RaftOptions& raft) {
  return std::filesystem::path(raft.dir).parent_path() / kRecoveryMarker;
}

// The index written by WriteMarker; 0 when there is none.
uint64_t ReadMarker(const RaftOptions& raft) {
  std::ifstream in(MarkerPath(raft));
  uint64_t index = 0;
  if (!(in >> index)) return 0;
  return index;
}

// Records, before the engine forces it, the index of the forced
// configuration (durably: a later start must see it).
absl::Status WriteMarker(const RaftOptions& raft, uint64_t index) {
  // Never in place: a marker lost to a power cut would let a restart with the
  // flag still set force a second configuration beside the one in use.
  return ReplaceFileDurably(MarkerPath(raft).string(),
                            absl::StrCat(index, "\n"));
}

// Member id -> client address: --peers, then what the replicated state
// recorded (members added later).
absl::StatusOr<std::map<uint64_t, std::string>> ClientAddresses(
    const ClusterStoreOptions& store) {
  std::map<uint64_t, std::string> addresses;
  for (const ClusterNode& node : store.nodes) {
    addresses[node.id] = node.client_address;
  }
  std::error_code ec;
  if (!std::filesystem::exists(store.state.path, ec)) return addresses;
  absl::StatusOr<std::unique_ptr<ReplicatedState>> state =
      ReplicatedState::Open(store.state);
  if (!state.ok()) return state.status();
  absl::StatusOr<std::map<uint64_t, std::string>> recorded =
      (*state)->Members();
  if (!recorded.ok()) return recorded.status();
  for (const auto& [id, address] : *recorded) addresses[id] = address;
  return addresses;
}

// Asks `peer` (its id and address set) for its log position and leader.
void Ask(const ChannelFactory& open_peer, PeerLogPosition& peer) {
  if (peer.client_address.empty()) {
    peer.reachable = false;
    peer.error = "client address unknown";
    return;
  }
  auto stub = v1::Cluster::NewStub(open_peer(peer.client_address));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kStatusTimeout);
  v1::ClusterStatusResponse response;
  const grpc::Status s =
      stub->Status(&context, v1::ClusterStatusRequest(), &response);
  peer.reachable = s.ok();
  if (!s.ok()) {
    const bool down = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    peer.error = absl::StrCat(down ? "" : "answered ", s.error_message());
    peer.refused = !down;
    return;
  }
  peer.refused = false;
  peer.error.clear();
  peer.leader_id = response.leader_id();
  peer.last_index = response.last_index();
  peer.last_log_term = response.last_log_term();
}

std::vector<PeerLogPosition> AskMembers(
    const std::vector<Member>& members, uint64_t self,
    const std::map<uint64_t, std::string>& addresses,
    const ChannelFactory& open_peer) {
  std::vector<PeerLogPosition> peers;
  for (const Member& member : members) {
    if (member.id == self) continue;
    PeerLogPosition peer;
    peer.id = member.id;
    auto it = addresses.find(member.id);
    if (it != addresses.end()) peer.client_address = it->second;
    Ask(open_peer, peer);
    peers.push_back(std::move(peer));
  }
  return peers;
}

// A group between two leaders answers "no leader" for an election or two:
// the reachable members are asked again for `watch`, until one knows a
// leader (a group that is not lost elects one within that time).
void WatchForLeader(const ChannelFactory& open_peer,
                    std::vector<PeerLogPosition>& peers,
                    std::chrono::milliseconds watch) {
  const auto deadline = std::chrono::steady_clock::now() + watch;
  while (std::chrono::steady_clock::now() < deadline) {
    bool asked = false;
    for (PeerLogPosition& peer : peers) {
      if (!peer.reachable) continue;
      if (peer.leader_id != 0) return;
      Ask(open_peer, peer);
      asked = true;
      if (peer.leader_id != 0) return;
    }
    if (!asked) return;
    std::this_thread::sleep_for(kWatchPoll);
  }
}

std::string DescribePeers(const std::vector<PeerLogPosition>& peers) {
  std::string reachable;
  std::string unreachable;
  for (const PeerLogPosition& peer : peers) {
    if (peer.reachable) {
      absl::StrAppend(&reachable, reachable.empty() ? "" : ", ", peer.id,
                      " (last log term ", peer.last_log_term, " index ",
                      peer.last_index, ", leader ", peer.leader_id, ")");
    } else {
      absl::StrAppend(&unreachable, unreachable.empty() ? "" : ", ", peer.id,
                      " at ",
                      peer.client_address.empty() ? "?" : peer.client_address,
                      " (", peer.error, ")");
    }
  }
  return absl::StrCat(
      "reachable members: ", reachable.empty() ? "none" : reachable,
      "; unreachable members: ", unreachable.empty() ? "none" : unreachable);
}

// Carries out a kForce decision: resets an unreachable term, logs what is
// done, leaves the marker and has the engine force the configuration.
absl::Status Force(ClusterConfig& config, const RaftLogSummary& own,
                   RecoveryDecision decision,
                   const std::vector<PeerLogPosition>& peers) {
  RaftOptions& raft = config.groups.front().raft;
  if (!decision.note.empty()) {
    LogWarning("--recover_as_sole_voter: ", decision.note);
  }
  // --peers, resolved at this start, wins over the log: a member Service
  // recreated with a new IP is reached at the new one.
  for (const ClusterNode& node : config.groups.front().nodes) {
    if (node.id == raft.id) decision.address = node.raft_address;
  }
  if (decision.reset_term > 0) {
    if (absl::Status s = SetRaftTerm(raft.dir, raft.id, raft.raft_address,
                                     decision.reset_term);
        !s.ok()) {
      return ExitWith(exit_code::kDataDir,
                      absl::StrCat("--recover_as_sole_voter: ", s.message()));
    }
    LogWarning("--recover_as_sole_voter: the persisted term ", own.current_term,
               " is out of reach of the log's (at most ", own.max_term,
               "): reset to ", decision.reset_term);
  }
  LogAnnouncement(
      kLogComponent, "recovery",
      absl::StrCat(
          "RECOVERY: forcing the configuration of node ", raft.id,
          " to itself as the only voter [", raft.id, " voter ",
          decision.address, "], replacing [", DescribeMembers(own.members),
          "]; this node's last ", "log entry: term ", own.last_term, " index ",
          own.last_index, " (current term ", own.current_term,
          "), every entry in it will commit. ", DescribePeers(peers),
          ". Stop and wipe every other old member; add fresh ones with "
          "`dedupctl cluster add`"));
  if (absl::Status s = WriteMarker(raft, own.last_index + 1); !s.ok()) {
    return ExitWith(exit_code::kDataDir,
                    absl::StrCat("--recover_as_sole_voter: ", s.message()));
  }
  raft.force_sole_voter_at = decision.address;
  config.groups.front().consensus = [raft](StateMachine* machine) {
    return StartRaft(raft, machine);
  };
  return absl::OkStatus();
}

}  // namespace

bool LogIsAhead(uint64_t term_a, uint64_t index_a, uint64_t term_b,
                uint64_t index_b) {
  return term_a > term_b || (term_a == term_b && index_a > index_b);
}

absl::StatusOr<RecoveryDecision> DecideRecovery(
    uint64_t self, const RaftLogSummary& own,
    const std::vector<PeerLogPosition>& peers, bool even_if_behind,
    uint64_t recovered_at) {
  if (own.last_index == 0) {
    return absl::FailedPreconditionError(
        "this node's Raft log is empty: nothing to recover from (run it on "
        "a surviving member's data)");
  }
  RecoveryDecision decision;
  bool self_voter = false;
  int other_voters = 0;
  for (const Member& member : own.members) {
    if (member.role != MemberRole::kVoter) continue;
    if (member.id == self) {
      self_voter = true;
      decision.address = member.raft_address;
    } else {
      ++other_voters;
    }
  }
  if (!self_voter) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", self, " is not a voter of its latest configuration [",
        DescribeMembers(own.members), "]: recover on a node that is"));
  }
  if (other_voters == 0) {
    decision.kind = RecoveryDecision::kAlreadySole;
    decision.note =
        "this node is already the only voter of its configuration: nothing "
        "to force, starting as usual (remove --recover_as_sole_voter)";
    return decision;
  }
  if (recovered_at > 0 && own.config_index > recovered_at) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this node already recovered the group (forced configuration at "
        "index ",
        recovered_at, ") and its members changed since (index ",
        own.config_index,
        "): start without --recover_as_sole_voter (to "
        "recover again after a new disaster, delete ",
        kRecoveryMarker, " in the data dir)"));
  }
  for (const PeerLogPosition& peer : peers) {
    if (peer.refused) {
      return absl::FailedPreconditionError(absl::StrCat(
          "member ", peer.id, " at ", peer.client_address, " ", peer.error,
          ": cannot tell whether the group is lost (check --peer_token_file "
          "and the TLS flags, or stop that member)"));
    }
    if (peer.reachable && peer.leader_id != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "member ", peer.id, " at ", peer.client_address,
          " knows a leader (node ", peer.leader_id,
          "): the group is not lost; start without --recover_as_sole_voter"));
    }
  }
  for (const PeerLogPosition& peer : peers) {
    if (!peer.reachable || !LogIsAhead(peer.last_log_term, peer.last_index,
                                       own.last_term, own.last_index)) {
      continue;
    }
    const std::string ahead = absl::StrCat(
        "member ", peer.id, "'s log (last entry term ", peer.last_log_term,
        " index ", peer.last_index, ") is ahead of this node's (term ",
        own.last_term, " index ", own.last_index, ")");
    if (!even_if_behind) {
      return absl::FailedPreconditionError(
          absl::StrCat(ahead,
                       ": recover on the most up-to-date member, or pass "
                       "--recover_even_if_behind to lose what only it holds"));
    }
    absl::StrAppend(&decision.note, decision.note.empty() ? "" : "; ", ahead,
                    ": recovering anyway (--recover_even_if_behind), what "
                    "only it holds is lost");
  }
  decision.kind = RecoveryDecision::kForce;
  if (own.current_term - own.max_term > kMaxTermJump) {
    decision.reset_term = own.max_term;
  }
  return decision;
}

absl::Status PrepareRecovery(ClusterConfig& config,
                             const ChannelFactory& open_peer) {
  const bool even_if_behind = absl::GetFlag(FLAGS_recover_even_if_behind);
  if (!absl::GetFlag(FLAGS_recover_as_sole_voter)) {
    if (!even_if_behind) return absl::OkStatus();
    return ExitWith(exit_code::kBadFlags,
                    "--recover_even_if_behind: only with "
                    "--recover_as_sole_voter");
  }
  if (!config.enabled) {
    return ExitWith(exit_code::kBadFlags,
                    "--recover_as_sole_voter: cluster mode only (--node_id)");
  }
  if (config.group_count > 1) {
    return ExitWith(exit_code::kBadFlags,
                    "--recover_as_sole_voter: not yet supported with "
                    "--groups > 1");
  }
  RaftOptions& raft = config.groups.front().raft;
  // The offline read below would stop where libraft's start would: at a
  // truncation a cut interrupted, which the start repairs anyway.
  if (absl::StatusOr<std::vector<std::string>> repaired =
          RepairInterruptedTruncation(raft.dir);
      !repaired.ok()) {
    return ExitWith(
        exit_code::kDataDir,
        absl::StrCat("--recover_as_sole_voter: ", repaired.status().message()));
  }
  absl::StatusOr<RaftLogSummary> own =
      ReadRaftLog(raft.dir, raft.id, raft.raft_address);
  if (!own.ok()) {
    return ExitWith(
        exit_code::kDataDir,
        absl::StrCat("--recover_as_sole_voter: ", own.status().message()));
  }
  absl::StatusOr<std::map<uint64_t, std::string>> addresses =
      ClientAddresses(config.groups.front());
  if (!addresses.ok()) {
    return ExitWith(
        exit_code::kDataDir,
        absl::StrCat("--recover_as_sole_voter: members' addresses: ",
                     addresses.status().message()));
  }
  std::vector<PeerLogPosition> peers =
      AskMembers(own->members, raft.id, *addresses, open_peer);
  WatchForLeader(
      open_peer, peers,
      std::chrono::milliseconds(4 * raft.election_timeout_ms + 1000));
  absl::StatusOr<RecoveryDecision> decision =
      DecideRecovery(raft.id, *own, peers, even_if_behind, ReadMarker(raft));
  const std::string found =
      absl::StrCat("configuration in the log: [", DescribeMembers(own->members),
                   "]; this node's last log entry: term ", own->last_term,
                   " index ", own->last_index, " (current term ",
                   own->current_term, "); ", DescribePeers(peers));
  if (!decision.ok()) {
    return ExitWith(exit_code::kRecoveryRefused,
                    absl::StrCat("--recover_as_sole_voter: refused: ",
                                 decision.status().message(), ". ", found));
  }
  if (decision->kind == RecoveryDecision::kAlreadySole) {
    LogWarning("--recover_as_sole_voter: ", decision->note, ". ", found);
    return absl::OkStatus();
  }
  return Force(config, *own, *std::move(decision), peers);
  return absl::OkStatus();
}

}  // namespace dedup
