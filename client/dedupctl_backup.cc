#include "client/dedupctl_backup.h"

#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/dedupctl_cli.h"
#include "common/backup_manifest.h"
#include "grpcpp/client_context.h"

namespace dedup::ctl {
namespace {

// How long a whole backup may take.
constexpr absl::Duration kBackupDeadline = absl::Hours(6);

BackupManifest ManifestOf(const v1::BackupInfo& info) {
  BackupManifest m;
  m.data_format_version = info.format_version();
  m.mode = info.mode();
  m.node_id = info.node_id();
  m.applied_index = info.applied_index();
  m.term = info.term();
  for (const v1::ClusterMember& member : info.members()) {
    m.members.push_back({member.id(), member.raft_address(),
                         member.client_address(), member.role()});
  }
  m.estimated_records = info.estimated_records();
  m.created_at_ms = info.created_at_ms();
  m.dedup_version = info.version();
  m.git_sha = info.git_sha();
  return m;
}

// Writes the stream's file chunks through `writer`.
absl::Status WriteFiles(grpc::ClientReaderInterface<v1::BackupChunk>& reader,
                        BackupWriter& writer, uint64_t& files) {
  v1::BackupChunk chunk;
  std::string name;
  uint64_t next_offset = 0;
  while (reader.Read(&chunk)) {
    if (!chunk.has_file()) {
      return absl::DataLossError("the server sent a second info message");
    }
    const v1::CheckpointChunk& file = chunk.file();
    if (file.offset() == 0) {
      if (absl::Status s = writer.StartFile(file.file_name(), file.file_size());
          !s.ok()) {
        return s;
      }
      name = file.file_name();
      ++files;
    } else if (file.file_name() != name || file.offset() != next_offset) {
      return absl::DataLossError(absl::StrCat(
          "chunk out of order: ", file.file_name(), " at ", file.offset()));
    }
    if (absl::Status s = writer.Append(file.data()); !s.ok()) return s;
    next_offset = file.offset() + file.data().size();
  }
  return absl::OkStatus();
}

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace

absl::StatusOr<BackupSummary> FetchBackup(v1::Admin::StubInterface& admin,
                                          const std::string& dir,
                                          absl::Duration deadline) {
  absl::StatusOr<std::unique_ptr<BackupWriter>> writer =
      BackupWriter::Create(dir);
  if (!writer.ok()) return writer.status();
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  std::unique_ptr<grpc::ClientReaderInterface<v1::BackupChunk>> reader =
      admin.Backup(&context, v1::BackupRequest());
  v1::BackupChunk first;
  if (!reader->Read(&first)) return FromGrpc(reader->Finish());
  if (!first.has_info()) {
    context.TryCancel();
    (void)reader->Finish();
    return absl::DataLossError("the server's backup did not start with info");
  }
  uint64_t files = 0;
  absl::Status written = WriteFiles(*reader, **writer, files);
  if (!written.ok()) {
    context.TryCancel();
    (void)reader->Finish();
    return written;
  }
  if (absl::Status s = FromGrpc(reader->Finish()); !s.ok()) return s;
  const v1::BackupInfo& info = first.info();
  if (absl::Status s = (*writer)->Finish(ManifestOf(info)); !s.ok()) return s;
  BackupSummary summary;
  summary.dir = dir;
  summary.mode = info.mode();
  summary.node_id = info.node_id();
  summary.applied_index = info.applied_index();
  summary.term = info.term();
  summary.files = files;
  summary.bytes = (*writer)->bytes();
  summary.estimated_records = info.estimated_records();
  summary.created_at_ms = info.created_at_ms();
  return summary;
}

int RunBackupCommand(LeaderRouter& router, const std::string& dir,
                     OutputFormat format, std::ostream& out,
                     std::ostream& err) {
  absl::Status last;
  for (const std::string& address : router.addresses()) {
    std::unique_ptr<v1::Admin::Stub> admin =
        v1::Admin::NewStub(router.EndpointFor(address)->channel);
    absl::StatusOr<BackupSummary> summary =
        FetchBackup(*admin, dir, kBackupDeadline);
    if (summary.ok()) {
      summary->address = address;
      if (format == OutputFormat::kJson) {
        PrintJson(out, BackupSummaryJson(*summary));
      } else {
        PrintBackupSummary(out, *summary);
      }
      return kExitOk;
    }
    last = summary.status();
    // Only a node that would not make it (a follower, one shutting down,
    // one out of reach) sends us on to the next; the directory is still
    // empty then. Anything else (a local write failed, a transfer broke)
    // is reported.
    std::error_code ec;
    const bool untouched = std::filesystem::is_empty(dir, ec) && !ec;
    if (!absl::IsUnavailable(last) || !untouched) break;
    // A progress note, not a result: JSON mode keeps stderr for the error.
    if (format == OutputFormat::kText) {
      err << "dedupctl: " << address << ": " << last.message()
          << "; trying the next address\n";
    }
  }
  return PrintError(
      format, err,
      absl::Status(last.code(), absl::StrCat("backup: ", last.message())),
      kExitRpcError);
}

namespace {

std::string CreatedAt(int64_t ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(ms),
                          absl::UTCTimeZone());
}

}  // namespace

nlohmann::json BackupSummaryJson(const BackupSummary& s) {
  return {{"dir", s.dir},
          {"address", s.address},
          {"mode", s.mode},
          {"nodeId", std::to_string(s.node_id)},
          {"appliedIndex", std::to_string(s.applied_index)},
          {"term", std::to_string(s.term)},
          {"files", std::to_string(s.files)},
          {"bytes", std::to_string(s.bytes)},
          {"estimatedRecords", std::to_string(s.estimated_records)},
          {"createdAtMs", std::to_string(s.created_at_ms)},
          {"createdAt", CreatedAt(s.created_at_ms)}};
}

void PrintBackupSummary(std::ostream& out, const BackupSummary& s) {
  out << "dir: " << s.dir << "\n"
      << "address: " << s.address << "\n"
      << "mode: " << s.mode << "\n"
      << "node_id: " << s.node_id << "\n"
      << "applied_index: " << s.applied_index << "\n"
      << "term: " << s.term << "\n"
      << "files: " << s.files << "\n"
      << "bytes: " << s.bytes << "\n"
      << "estimated_records: " << s.estimated_records << "\n"
      << "created_at: " << CreatedAt(s.created_at_ms) << " (" << s.created_at_ms
      << ")\n";
}

}  // namespace dedup::ctl
