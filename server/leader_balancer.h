// Spreads leadership over the nodes: a hosted group led by this node when
// its preferred leader (its layout's first replica) is another, caught-up
// voter hands leadership to it: once the term has lasted a few seconds
// (a leader that just took over from a stopping preferred leader must not
// hand back to it), asked again every few seconds while it has not taken
// effect (the transfer failed). With
// FoundingLayout every node is the preferred leader of at most ceil(G/N)
// groups, so once all nodes are up no node leads more than that.
#ifndef DEDUP_SERVER_LEADER_BALANCER_H_
#define DEDUP_SERVER_LEADER_BALANCER_H_

#include <cstdint>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/group_directory.h"

namespace dedup {

// The preferred leader `status` (this node's view of a group placed as
// `group`) should hand leadership to now, or 0: this node leads, the
// preferred leader is another voter that answered it lately and whose log
// is within a few entries of the leader's last index, and nothing holds the
// hand-off back (`hold`: one is pending, or the term is too young). Pure.
[[nodiscard]] uint64_t HandOffTarget(const GroupPlacement& group,
                                     const ConsensusStatus& status, bool hold);

// Checks every `interval` on a thread of its own (never the consensus loop
// nor a gRPC thread); transfers are asynchronous, their failures logged.
// `groups` must outlive the balancer; destruction stops and joins the
// thread.
class LeaderBalancer {
 public:
  LeaderBalancer(const GroupDirectory* groups, absl::Duration interval);
  ~LeaderBalancer();
  LeaderBalancer(const LeaderBalancer&) = delete;
  LeaderBalancer& operator=(const LeaderBalancer&) = delete;

 private:
  void Run();
  void CheckOnce();

  const GroupDirectory* const groups_;
  const absl::Duration interval_;
  // What the balancer saw of a group's current term.
  struct Seen {
    uint64_t term = 0;
    absl::Time since = absl::InfinitePast();  // when the term was first seen
    bool asked = false;                       // a hand-off was asked in it
    absl::Time asked_at = absl::InfinitePast();
  };
  // Group id -> its current term as seen (thread-confined).
  std::map<uint32_t, Seen> seen_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_LEADER_BALANCER_H_
