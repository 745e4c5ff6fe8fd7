// Consensus on Canonical's libraft 0.15 with its libuv I/O: the log and
// snapshots in `dir` (raft_uv), peers over the node-to-node plane
// (peer_plane.h: authenticated, optionally TLS, every frame checked).
//
// libraft is not thread-safe: every call into it runs on the thread of its
// libuv loop (a RaftLoop, raft_consensus_shared_loop.h, of its own or shared
// with the node's other groups). Other threads reach it only through Post.
#ifndef DEDUP_REPLICATION_RAFT_CONSENSUS_H_
#define DEDUP_REPLICATION_RAFT_CONSENSUS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "replication/consensus.h"
#include "replication/peer_plane.h"
#include "replication/raft_consensus_shared_loop.h"

namespace dedup {

struct RaftOptions {
  uint64_t id = 0;  // > 0, unique in the group
  // host:port this node listens on for its peers and is known by. The host
  // must be an IPv4 literal (libraft 0.15 resolves no names).
  std::string raft_address;
  std::string dir;  // created if missing
  // The group's voters at its very first start (this node included). Every
  // founding member is started with the same list; once a node has a log the
  // list is ignored. Empty: this node joins an existing group (the leader
  // adds it) and waits for it to send the log.
  std::vector<Member> bootstrap;
  unsigned election_timeout_ms = 500;  // randomized in [1x, 2x)
  unsigned heartbeat_timeout_ms = 100;
  // Entries between snapshots, and entries kept behind a snapshot so that
  // a briefly lagging follower catches up from the log, not a snapshot.
  // Snapshots are rare on purpose: libraft 0.15 applies no entry while it
  // writes one (its fsm version 2), which stalls the group's answers
  // (docs/decisions.md); log_budget_bytes still bounds what the log holds.
  unsigned snapshot_threshold = 65536;
  unsigned snapshot_trailing = 4096;
  // Bytes of entries the log may hold (libraft keeps them in memory as well
  // as on disk): large entries lower both counts above (log_budget.h).
  uint64_t log_budget_bytes = 256 << 20;
  // The node's peer plane, listening on raft_address (it may be shared by
  // several groups). Null: a plaintext plane of the engine's own, with
  // the default limits and no authentication (tests, loopback).
  std::shared_ptr<PeerPlane> peer_plane;
  // This group's id in the plane (the hello names it).
  uint32_t group_id = 0;
  // The loop (and thread) this group runs on, shared with other groups of
  // the node so that idle groups wake the node together rather than each on
  // its own. Null: a loop of the engine's own.
  std::shared_ptr<RaftLoop> loop;
  // Disaster recovery: when not empty, before starting, append to the log a
  // configuration naming this node, at this address (the one its peers know
  // it by, which may differ from raft_address behind a NAT or a Service), as
  // the only voter (libraft's raft_recover), so that it elects itself and
  // commits every entry its log holds. Only for a group that lost its
  // majority for good, on its most up-to-date survivor, once
  // (server/recovery.h decides); every other member must be gone.
  std::string force_sole_voter_at;
};

// Starts the engine (and its loop's thread, without options.loop).
// `machine` is not owned and must outlive the returned object (Stop it
// first). StateMachine::Restore and Apply may run, on the loop's thread,
// before this returns (a restart replays the log). Not from a loop thread.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Consensus>> StartRaft(
    const RaftOptions& options, StateMachine* machine);

}  // namespace dedup

#endif  // DEDUP_REPLICATION_RAFT_CONSENSUS_H_
