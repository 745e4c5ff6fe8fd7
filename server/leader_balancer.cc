#include "server/leader_balancer.h"

#include "common/log.h"

namespace dedup {
namespace {

// Entries a preferred leader may lag and still count as caught up: under
// load a follower's match index trails the leader's last one by the entries
// in flight, and the transfer itself sends it the rest.
constexpr uint64_t kCaughtUpSlack = 64;

// A hand-off that did not take effect (the target was slow, or lost) is
// asked again this long after, in the same term.
constexpr absl::Duration kRetryAfter = absl::Seconds(5);

}  // namespace

uint64_t HandOffTarget(const GroupPlacement& group,
                       const ConsensusStatus& status, bool asked) {
  if (status.role != Role::kLeader || group.replicas.empty() || asked) {
    return 0;
  }
  const uint64_t preferred = group.replicas.front();
  if (preferred == status.id) return 0;
  for (const Member& member : status.members) {
    // A match index of 0: the member has not answered this leader yet; not
    // heard lately: it is down (a transfer to it would only stall the
    // group for an election timeout).
    if (member.id == preferred && member.role == MemberRole::kVoter &&
        member.match_index > 0 && member.recently_heard &&
        member.match_index + kCaughtUpSlack >= status.last_index) {
      return preferred;
    }
  }
  return 0;
}

LeaderBalancer::LeaderBalancer(const GroupDirectory* groups,
                               absl::Duration interval)
    : groups_(groups), interval_(interval), thread_([this] { Run(); }) {}

LeaderBalancer::~LeaderBalancer() {
  stop_.Notify();
  thread_.join();
}

void LeaderBalancer::Run() {
  while (!stop_.WaitForNotificationWithTimeout(interval_)) CheckOnce();
}

void LeaderBalancer::CheckOnce() {
  for (const auto& [id, store] : groups_->hosted()) {
    const GroupPlacement* group = groups_->layout().Find(id);
    if (group == nullptr) continue;
    const ConsensusStatus status = store->GetClusterStatus().consensus;
    const Asked& last = asked_[id];
    const bool asked =
        last.term == status.term && absl::Now() < last.at + kRetryAfter;
    const uint64_t target = HandOffTarget(*group, status, asked);
    if (target == 0) continue;
    asked_[id] = {status.term, absl::Now()};
    LogInfo("group ", id, ": handing leadership to its preferred leader, node ",
            target);
    store->TransferLeadership(target, [id = id](absl::Status s) {
      if (!s.ok())
        LogWarning("group ", id, ": leadership hand-off: ", s.message());
    });
  }
}

}  // namespace dedup
