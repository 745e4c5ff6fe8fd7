// dedupctl backup DIR: streams a node's backup (dedup.v1.Admin/Backup) into
// DIR on this machine and writes its manifest (common/backup_manifest.h).
// Thread-compatible; writes only to the given streams and DIR.
#ifndef DEDUP_CLIENT_DEDUPCTL_BACKUP_H_
#define DEDUP_CLIENT_DEDUPCTL_BACKUP_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/dedupctl_output.h"
#include "client/leader_router.h"
#include "dedup/v1/admin.grpc.pb.h"

namespace dedup::ctl {

// What `dedupctl backup` reports (text: one "field: value" line each, in
// this order; -o json: the same fields in lowerCamelCase, 64-bit integers as
// strings, as the proto3 JSON mapping the other commands print).
struct BackupSummary {
  std::string dir;
  std::string address;  // the node that made it
  std::string mode;     // single or cluster
  uint64_t node_id = 0;
  uint64_t applied_index = 0;
  uint64_t term = 0;
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t estimated_records = 0;
  int64_t created_at_ms = 0;
};

// Streams one backup from `admin` into `dir` (created, or empty), then
// writes the manifest. On error `dir` holds no manifest (an unfinished
// backup: remove it). `deadline` bounds the whole transfer.
[[nodiscard]] absl::StatusOr<BackupSummary> FetchBackup(
    v1::Admin::StubInterface& admin, const std::string& dir,
    absl::Duration deadline);

// The command: asks the router's addresses in order until one makes the
// backup (in cluster mode only the leader does: followers answer
// UNAVAILABLE), prints the summary. Returns the exit code documented in
// dedupctl_cli.h.
[[nodiscard]] int RunBackupCommand(LeaderRouter& router, const std::string& dir,
                                   OutputFormat format, std::ostream& out,
                                   std::ostream& err);

void PrintBackupSummary(std::ostream& out, const BackupSummary& summary);
[[nodiscard]] nlohmann::json BackupSummaryJson(const BackupSummary& summary);

}  // namespace dedup::ctl

#endif  // DEDUP_CLIENT_DEDUPCTL_BACKUP_H_
