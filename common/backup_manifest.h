// A backup's manifest: what `dedupctl backup DIR` made and how to tell it is
// whole. DIR holds the database files flat and kManifestFileName, written
// last and durably: a directory without it is an unfinished backup.
//
// The manifest is JSON (field names below, stable):
//   {"format": "dedup-backup/1", "data_format_version": 1, "mode": "single",
//    "node_id": 0, "applied_index": 0, "term": 0, "members": [{"id": 1,
//    "raft_address": "…", "client_address": "…", "role": "voter"}],
//    "estimated_records": 12, "created_at_ms": 1764236400000,
//    "created_at": "2025-11-27T09:40:00.000Z", "dedup_version": "0.1.0",
//    "git_sha": "…", "files": [{"name": "000009.sst", "size": 1234,
//    "sha256": "<64 hex digits>"}]}
//
// Shared by dedupctl (writes backups) and dedupd (verifies and restores
// them). Thread-compatible.
#ifndef DEDUP_COMMON_BACKUP_MANIFEST_H_
#define DEDUP_COMMON_BACKUP_MANIFEST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dedup {

inline constexpr char kManifestFileName[] = "dedup-backup.json";
inline constexpr char kBackupFormat[] = "dedup-backup/1";

struct BackupMember {
  uint64_t id = 0;
  std::string raft_address;
  std::string client_address;
  std::string role;  // voter, standby or spare
};

struct BackupFile {
  std::string name;  // a plain file name
  uint64_t size = 0;
  std::string sha256;  // lower-case hex
};

struct BackupManifest {
  uint32_t data_format_version = 0;
  std::string mode;  // "single" or "cluster"
  uint64_t node_id = 0;
  uint64_t applied_index = 0;
  uint64_t term = 0;
  std::vector<BackupMember> members;
  uint64_t estimated_records = 0;
  int64_t created_at_ms = 0;
  std::string dedup_version;
  std::string git_sha;
  std::vector<BackupFile> files;
};

[[nodiscard]] std::string EncodeManifest(const BackupManifest& manifest);
// DataLossError naming what is wrong (not JSON, another format, a field of
// the wrong type, a file name that is not plain).
[[nodiscard]] absl::StatusOr<BackupManifest> DecodeManifest(
    absl::string_view text);

// True for a name without a directory part ("", ".", ".." and names with
// '/' or NUL are not).
[[nodiscard]] bool PlainFileName(absl::string_view name);

// SHA-256 of bytes fed in pieces.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(absl::string_view bytes);
  // Lower-case hex of the digest; the object is spent afterwards.
  [[nodiscard]] std::string HexDigest();

 private:
  struct Context;
  std::unique_ptr<Context> context_;
};

// Reads the manifest of the backup in `dir` and checks that every file it
// lists is there with its size and SHA-256. Errors name the file:
// NotFoundError for a missing manifest or file, DataLossError for a
// damaged one (and for a manifest that does not parse).
[[nodiscard]] absl::StatusOr<BackupManifest> VerifyBackup(
    const std::string& dir);

// Writes a backup into a directory, file by file, each fsynced, then the
// manifest last (a temporary file fsynced, renamed, the directory fsynced).
class BackupWriter {
 public:
  // Creates `dir` (its parent must exist) or takes an empty one; refuses a
  // directory that holds anything (FailedPreconditionError).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<BackupWriter>> Create(
      const std::string& dir);
  ~BackupWriter();

  // Starts file `name` (plain) of `size` bytes; the previous one must be
  // whole.
  [[nodiscard]] absl::Status StartFile(const std::string& name, uint64_t size);
  [[nodiscard]] absl::Status Append(absl::string_view data);
  // Writes the manifest: `manifest` with this writer's files.
  [[nodiscard]] absl::Status Finish(BackupManifest manifest);

  // Total bytes of the files written.
  [[nodiscard]] uint64_t bytes() const { return bytes_; }

 private:
  explicit BackupWriter(std::string dir) : dir_(std::move(dir)) {}
  [[nodiscard]] absl::Status CloseFile();

  const std::string dir_;
  int fd_ = -1;
  BackupFile current_;
  uint64_t written_ = 0;
  std::unique_ptr<Sha256> hash_;
  std::vector<BackupFile> files_;
  uint64_t bytes_ = 0;
};

// Copies `from` to `to` (which must not exist), fsyncs it and checks the
// copy's size and SHA-256 against `expected` on the way (the source may
// have changed since it was verified). Does not sync the directory.
[[nodiscard]] absl::Status CopyBackupFile(const std::string& from,
                                          const std::string& to,
                                          const BackupFile& expected);

// fsyncs the directory `dir`.
[[nodiscard]] absl::Status SyncDirectory(const std::string& dir);

}  // namespace dedup

#endif  // DEDUP_COMMON_BACKUP_MANIFEST_H_
