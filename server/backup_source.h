// The server's side of a backup (dedup.v1.Admin/Backup): the copy of this
// node's data that the call streams, and what the backup's manifest says
// about it.
#ifndef DEDUP_SERVER_BACKUP_SOURCE_H_
#define DEDUP_SERVER_BACKUP_SOURCE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dedup/v1/admin.pb.h"
#include "replication/replicated_store.h"
#include "storage/clock.h"
#include "storage/store.h"

namespace dedup {

struct BackupSource {
  Store* store = nullptr;                 // always
  ReplicatedStore* replicated = nullptr;  // cluster mode; else null
  // When not empty, every backup is refused FAILED_PRECONDITION with this
  // message (a node whose data no backup covers whole).
  std::string refusal;
  // Single node: where the checkpoint is made (inside the data dir, so
  // that its files are hard links); replaced by each backup.
  std::string scratch_dir;
  const Clock* clock = nullptr;  // the backup's creation time
  std::string version;
  std::string git_sha;
  // Cluster mode: how long to wait for this node (the leader) to apply
  // every entry its log held when the backup started.
  absl::Duration apply_wait = absl::Seconds(10);
};

// Makes the checkpoint a backup streams and fills `info`. Blocks (a RocksDB
// flush; cluster mode: until this node applied every entry its log held at
// the start): run it on a thread of its own. Every write answered before
// the call is in the copy. Cluster mode: UNAVAILABLE naming the leader on a
// follower; DEADLINE_EXCEEDED when the applies do not catch up in time.
// The caller removes the returned directory.
[[nodiscard]] absl::StatusOr<OutgoingCheckpoint> MakeBackup(
    const BackupSource& source, v1::BackupInfo* info);

}  // namespace dedup

#endif  // DEDUP_SERVER_BACKUP_SOURCE_H_
