#include "server/backup_restore.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/backup_manifest.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "replication/raft_seed.h"
#include "replication/snapshot_transfer.h"
#include "server/exit_status.h"
#include "storage/durable_dir.h"
#include "storage/format_version.h"
#include "storage/restored_state.h"

ABSL_FLAG(std::string, restore_from, "",
          "fill the empty --data_dir from the backup in this directory (made "
          "by `dedupctl backup`; every file's checksum is verified first), "
          "then serve. A group's backup seeds a new group: give --node_id "
          "and --peers listing only this node, then add the others with "
          "`dedupctl cluster add` and --join. Exit code 9 when refused");

namespace dedup {
namespace {

namespace fs = std::filesystem;

absl::Status Refuse(absl::string_view why) {
  return ExitWith(exit_code::kRestoreRefused,
                  absl::StrCat("--restore_from refused: ", why));
}

absl::Status CheckDataDirEmpty(const std::string& data_dir) {
  std::error_code ec;
  if (!fs::exists(data_dir, ec)) return absl::OkStatus();
  if (!fs::is_directory(data_dir, ec)) {
    return Refuse(absl::StrCat("--data_dir ", data_dir,
                               " exists and is not a directory"));
  }
  fs::directory_iterator it(data_dir, ec);
  if (ec) {
    return Refuse(
        absl::StrCat("cannot list --data_dir ", data_dir, ": ", ec.message()));
  }
  if (it != fs::directory_iterator()) {
    return Refuse(absl::StrCat(
        "--data_dir ", data_dir, " is not empty (it holds ",
        it->path().filename().string(),
        "): restore into a new or empty directory, never over a node's data"));
  }
  return absl::OkStatus();
}

// The backup's mode and format against this binary and its flags.
absl::Status CheckFits(const BackupManifest& m, const ClusterConfig& cluster) {
  if (m.data_format_version > storage::kDataFormatVersion ||
      m.data_format_version < storage::kOldestReadableFormatVersion) {
    return Refuse(absl::StrCat(
        "the backup's data format is ", m.data_format_version,
        "; this dedupd reads formats ", storage::kOldestReadableFormatVersion,
        " to ", storage::kDataFormatVersion, " (restore it with a dedupd of ",
        m.dedup_version, " or later)"));
  }
  if (m.mode == "single") {
    if (cluster.enabled) {
      return Refuse(
          "the backup is of a single node: restore it without --node_id");
    }
    return absl::OkStatus();
  }
  if (m.mode != "cluster") {
    return Refuse(absl::StrCat("the backup's mode '", m.mode, "' is unknown"));
  }
  if (!cluster.enabled) {
    return Refuse(
        "the backup is of a group: restore it as the first node of a new "
        "group (--node_id, --peers listing only this node)");
  }
  if (cluster.group_count > 1) {
    return Refuse("a restore is not yet supported with --groups > 1");
  }
  const std::vector<Member>& founders = cluster.groups.front().raft.bootstrap;
  if (founders.size() != 1 || founders[0].id != cluster.node_id) {
    return Refuse(
        "a restored group starts with this node alone: --peers must list "
        "only this node (not --join); add the other nodes afterwards with "
        "`dedupctl cluster add` and start them with --join: they receive the "
        "state by snapshot");
  }
  return absl::OkStatus();
}

// The files in copy order: RocksDB's CURRENT last, so that a copy cut
// short is not a database a later start would open as whole.
std::vector<BackupFile> CopyOrder(std::vector<BackupFile> files) {
  std::stable_partition(files.begin(), files.end(), [](const BackupFile& f) {
    return f.name != "CURRENT";
  });
  return files;
}

absl::Status CopyFiles(const std::string& backup_dir, const std::string& target,
                       const BackupManifest& m) {
  if (absl::Status s = CreateDirectoriesDurably(target); !s.ok()) return s;
  for (const BackupFile& file : CopyOrder(m.files)) {
    if (absl::Status s =
            CopyBackupFile(absl::StrCat(backup_dir, "/", file.name),
                           absl::StrCat(target, "/", file.name), file);
        !s.ok()) {
      return s;
    }
  }
  return SyncDirectory(target);
}

// A new group's log: a snapshot at the backup's index, taken by this node.
absl::Status SeedLog(const BackupManifest& m, const ClusterConfig& cluster) {
  const RaftOptions& raft = cluster.groups.front().raft;
  if (absl::Status s = CreateDirectoriesDurably(raft.dir); !s.ok()) return s;
  SnapshotDescriptor descriptor;
  descriptor.index = m.applied_index;
  descriptor.taker = cluster.node_id;
  return SeedRaftLog(raft.dir, raft.id, raft.raft_address, m.applied_index,
                     EncodeSnapshotDescriptor(descriptor));
}

// The backup's data format, recorded as format_version.h says (decimal
// and a newline): without the file the dir would pass for one written
// before the file existed.
absl::Status RecordFormat(const std::string& data_dir,
                          const BackupManifest& m) {
  return ReplaceFileDurably(
      absl::StrCat(data_dir, "/", storage::kFormatFileName),
      absl::StrCat(m.data_format_version, "\n"));
}

}  // namespace

std::string RestoreFromFlag() { return absl::GetFlag(FLAGS_restore_from); }

absl::Status CheckNoUnfinishedRestore(const std::string& data_dir) {
  std::error_code ec;
  if (!fs::exists(fs::path(data_dir) / kRestoreMarker, ec)) {
    return absl::OkStatus();
  }
  return ExitWith(
      exit_code::kDataDir,
      absl::StrCat("data dir ", data_dir, " holds an unfinished restore (",
                   kRestoreMarker, "): empty it and run the restore again"));
}

absl::Status RestoreFromBackup(const std::string& backup_dir,
                               const std::string& data_dir,
                               const ClusterConfig& cluster) {
  if (absl::Status s = CheckDataDirEmpty(data_dir); !s.ok()) return s;
  absl::StatusOr<BackupManifest> manifest = VerifyBackup(backup_dir);
  if (!manifest.ok()) return Refuse(manifest.status().message());
  if (absl::Status s = CheckFits(*manifest, cluster); !s.ok()) return s;
  const std::string target =
      cluster.enabled ? cluster.groups.front().state.path : data_dir;
  const std::string marker = absl::StrCat(data_dir, "/", kRestoreMarker);
  absl::Status copied = CreateDirectoriesDurably(data_dir);
  if (copied.ok()) copied = CreateFileDurably(marker, backup_dir + "\n", 0644);
  if (copied.ok()) copied = CopyFiles(backup_dir, target, *manifest);
  if (copied.ok() && cluster.enabled) copied = ForgetRecordedMembers(target);
  if (copied.ok() && cluster.enabled) copied = SeedLog(*manifest, cluster);
  if (copied.ok()) copied = RecordFormat(data_dir, *manifest);
  if (copied.ok() && ::unlink(marker.c_str()) != 0) {
    copied = absl::InternalError(
        absl::StrCat("cannot remove ", marker, ": ", std::strerror(errno)));
  }
  if (copied.ok()) copied = SyncDirectory(data_dir);
  if (!copied.ok()) {
    return ExitWith(exit_code::kDataDir,
                    absl::StrCat("restoring ", backup_dir, " into ", data_dir,
                                 " failed: ", copied.message(),
                                 "; empty the data dir and try again"));
  }
  LogInfo("restored the ", manifest->mode, " backup ", backup_dir, " (",
          manifest->files.size(), " files",
          cluster.enabled
              ? absl::StrCat(", applied index ", manifest->applied_index)
              : std::string(),
          ") into ", data_dir);
  return absl::OkStatus();
}

}  // namespace dedup
