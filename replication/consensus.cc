// Names of the engine-neutral roles (consensus.h).
#include "replication/consensus.h"

namespace dedup {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kUnavailable:
      return "unavailable";
    case Role::kFollower:
      return "follower";
    case Role::kCandidate:
      return "candidate";
    case Role::kLeader:
      return "leader";
  }
  return "unknown";
}

const char* MemberRoleName(MemberRole role) {
  switch (role) {
    case MemberRole::kVoter:
      return "voter";
    case MemberRole::kStandby:
      return "standby";
    case MemberRole::kSpare:
      return "spare";
  }
  return "unknown";
}

}  // namespace dedup
