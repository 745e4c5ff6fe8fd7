// dedupd --restore_from=DIR: fills an empty data dir from a backup made by
// `dedupctl backup` (common/backup_manifest.h) before the node opens it.
//
// A single node's backup restores a single node. A group's backup seeds a
// NEW group: the restored node is its only founding member (--node_id with
// --peers listing only itself), its Raft log starts with a snapshot at the
// backup's applied index (raft_seed.h), and the other nodes are added as
// today (`dedupctl cluster add`, then dedupd --join), receiving the state by
// snapshot install. Node ids are the operator's to choose again; the old
// group's membership is in the manifest for reference only.
#ifndef DEDUP_SERVER_BACKUP_RESTORE_H_
#define DEDUP_SERVER_BACKUP_RESTORE_H_

#include <string>

#include "absl/status/status.h"
#include "server/cluster_config.h"

namespace dedup {

// A file in the data dir while a restore fills it: a start finding it
// refuses the dir (CheckNoUnfinishedRestore), which a restore cut short
// left partly filled.
inline constexpr char kRestoreMarker[] = "RESTORE-IN-PROGRESS";

// The --restore_from flag; empty: no restore.
[[nodiscard]] std::string RestoreFromFlag();

// Verifies the backup in `backup_dir` (the manifest and every file's size
// and SHA-256), checks that it fits this node (`cluster` as configured from
// the flags) and that `data_dir` is empty or missing, then copies the files
// in, each fsynced (RocksDB's CURRENT last), and syncs the directories.
// Errors end the process (server/exit_status.h): kRestoreRefused, naming
// the file or the reason, before anything is written; kDataDir when the
// copy itself fails (the data dir is then partly filled, and marked so
// until the restore is whole: empty it and run the restore again).
[[nodiscard]] absl::Status RestoreFromBackup(const std::string& backup_dir,
                                             const std::string& data_dir,
                                             const ClusterConfig& cluster);

// kDataDir (server/exit_status.h) when `data_dir` holds kRestoreMarker.
[[nodiscard]] absl::Status CheckNoUnfinishedRestore(
    const std::string& data_dir);

}  // namespace dedup

#endif  // DEDUP_SERVER_BACKUP_RESTORE_H_
