#include "replication/raft_codes.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/log.h"

// libraft 0.15's headers declare C functions without extern "C".
extern "C" {
#include <raft.h>
}

namespace dedup {

int ToRaftRole(MemberRole role) {
  switch (role) {
    case MemberRole::kVoter:
      return RAFT_VOTER;
    case MemberRole::kStandby:
      return RAFT_STANDBY;
    case MemberRole::kSpare:
      return RAFT_SPARE;
  }
  return RAFT_SPARE;
}

MemberRole FromRaftRole(int role) {
  switch (role) {
    case RAFT_VOTER:
      return MemberRole::kVoter;
    case RAFT_STANDBY:
      return MemberRole::kStandby;
    default:
      return MemberRole::kSpare;
  }
}

Role FromRaftState(int state) {
  switch (state) {
    case RAFT_FOLLOWER:
      return Role::kFollower;
    case RAFT_CANDIDATE:
      return Role::kCandidate;
    case RAFT_LEADER:
      return Role::kLeader;
    default:
      return Role::kUnavailable;
  }
}

absl::Status RaftError(int rv, absl::string_view what, struct raft* r) {
  const std::string message =
      absl::StrCat(what, ": ", raft_strerror(rv),
                   r != nullptr ? absl::StrCat(" (", raft_errmsg(r), ")") : "");
  if (rv == RAFT_NOTLEADER) return absl::FailedPreconditionError(message);
  if (rv == RAFT_LEADERSHIPLOST || rv == RAFT_SHUTDOWN) {
    return absl::AbortedError(message);
  }
  if (rv == RAFT_BADID || rv == RAFT_DUPLICATEID ||
      rv == RAFT_DUPLICATEADDRESS || rv == RAFT_BADROLE ||
      rv == RAFT_NOTFOUND) {
    return absl::InvalidArgumentError(message);
  }
  if (rv == RAFT_CANTCHANGE) return absl::FailedPreconditionError(message);
  return absl::UnavailableError(message);
}

std::string AppendError(int rv, const char* detail) {
  return absl::StrCat(
      rv == RAFT_NOSPACE ? "no space left on the disk" : raft_strerror(rv),
      " (", rv, "): ", detail);
}

[[noreturn]] void StopOnStorageFailure(const std::string& what) {
  // LogError flushes: the line is out before _exit.
  LogError("FATAL: ", what,
           "; stopping so that the group goes on without this node (restart "
           "it once its disk has room or works: it catches up from the "
           "others)");
  _exit(kExitStorageFailure);
}

}  // namespace dedup
