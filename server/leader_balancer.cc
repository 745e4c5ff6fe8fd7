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

// How long a term must have lasted before its leader hands over.
constexpr absl::Duration kSettleFor = absl::Seconds(3);

}  // namespace

uint64_t HandOffTarget(const GroupPlacement& group,
                       const ConsensusStatus& status, bool hold) {
  if (status.role != Role::kLeader || group.replicas.empty() || hold) {
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
    Seen& seen = seen_[id];
    const absl::Time now = absl::Now();
    if (seen.term != status.term) seen = {status.term, now, false};
    // Leading for a while first: a preferred leader that just handed
    // leadership here may be stopping, and is still "heard" for up to an
    // election timeout.
    const bool hold = now < seen.since + kSettleFor ||
                      (seen.asked && now < seen.asked_at + kRetryAfter);
    const uint64_t target = HandOffTarget(*group, status, hold);
    if (target == 0) continue;
    seen.asked = true;
    seen.asked_at = now;
    LogInfo("group ", id, ": handing leadership to its preferred leader, node ",
            target);
    store->TransferLeadership(target, [id = id](absl::Status s) {
      if (!s.ok())
        LogWarning("group ", id, ": leadership hand-off: ", s.message());
    });
  }
}

}  // namespace dedup
