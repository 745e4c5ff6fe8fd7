// Disaster recovery (--recover_as_sole_voter): a group that lost its
// majority for good is restarted from one survivor, which forces its
// configuration to itself as the only voter (libraft's raft_recover) and
// elects itself; fresh members are then added with `dedupctl cluster add`.
//
// Safe only on the most up-to-date survivor, once, and when the group is
// really lost. Before forcing, the node asks every other member of the
// configuration in its log that it can reach (Cluster.Status) for its log
// position and leader, and refuses when one is ahead (unless
// --recover_even_if_behind) or when one knows a leader: a group with a
// leader is not lost. The flag is one-shot: forcing leaves a marker in the
// data dir (the index of the forced configuration), and once members were
// added after it the node refuses to force again, reachable or not, until
// the marker is deleted.
#ifndef DEDUP_SERVER_RECOVERY_H_
#define DEDUP_SERVER_RECOVERY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/channel_security.h"
#include "replication/raft_log_probe.h"
#include "server/cluster_config.h"

namespace dedup {

// What another member said about itself (Cluster.Status).
struct PeerLogPosition {
  uint64_t id = 0;
  std::string client_address;  // "" when no address is known
  bool reachable = false;
  std::string error;  // why it was not reachable, or what it answered
  // It answered with an error (not UNAVAILABLE or a timeout): it runs, but
  // its state is unknown (e.g. this node's peer token is refused).
  bool refused = false;
  uint64_t leader_id = 0;
  uint64_t last_index = 0;
  uint64_t last_log_term = 0;
};

struct RecoveryDecision {
  enum Kind {
    kForce,       // force {self} as the only voter
    kAlreadySole  // already the only voter: start as usual
  };
  Kind kind = kForce;
  std::string note;  // what to log with the decision
  // kForce: when > 0, the persisted term to set first. A term far above
  // every term in the log was pushed there by a bogus message (terms rise by
  // one per election); left alone, the next election would overflow it.
  uint64_t reset_term = 0;
  // kForce: this node's Raft address in the configuration it replaces (the
  // one its peers know it by), for the forced configuration. PrepareRecovery
  // prefers this node's --peers entry, resolved at this start.
  std::string address;
};

// A current term more than this above the log's highest term is never
// legitimate.
inline constexpr uint64_t kMaxTermJump = uint64_t{1} << 32;

// True when log (term_a, index_a) is more up to date than (term_b, index_b),
// by Raft's rule (higher last term, or same term and longer).
[[nodiscard]] bool LogIsAhead(uint64_t term_a, uint64_t index_a,
                              uint64_t term_b, uint64_t index_b);

// The decision from this node's log and what the others said; an error
// (to exit with exit_code::kRecoveryRefused) says why recovery is refused.
// `recovered_at`: the index of the configuration this node forced before
// (its recovery marker), 0 if none; a configuration set after it means the
// group was rebuilt, and forcing again could split it (members that are
// merely down are indistinguishable from lost ones). Pure.
[[nodiscard]] absl::StatusOr<RecoveryDecision> DecideRecovery(
    uint64_t self, const RaftLogSummary& own,
    const std::vector<PeerLogPosition>& peers, bool even_if_behind,
    uint64_t recovered_at = 0);

// With --recover_as_sole_voter: reads this node's Raft log, asks the other
// members (through `open_peer`, a few seconds at most per member, and up to
// a few election timeouts watching for a leader), logs what it found and
// did, and sets config.groups.front().raft.force_sole_voter_at (with its
// consensus factory). Without the flag: nothing. Must run before the store
// opens (it reads the members' client addresses from the replicated state). An
// error carries the exit code (server/exit_status.h).
[[nodiscard]] absl::Status PrepareRecovery(ClusterConfig& config,
                                           const ChannelFactory& open_peer);

}  // namespace dedup

#endif  // DEDUP_SERVER_RECOVERY_H_
