#include "common/backup_manifest.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace dedup {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr size_t kReadBytes = 1 << 20;

absl::Status Errno(absl::string_view what, const std::string& path) {
  const int error = errno;
  std::string message = absl::StrCat(what, " ", path, ": ", strerror(error));
  if (error == ENOENT) return absl::NotFoundError(message);
  return absl::InternalError(message);
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot write", path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status SyncAndClose(int fd, const std::string& path) {
  if (::fsync(fd) != 0) {
    absl::Status s = Errno("cannot fsync", path);
    ::close(fd);
    return s;
  }
  if (::close(fd) != 0) return Errno("cannot close", path);
  return absl::OkStatus();
}

// Reads `path` whole through `consume`; the file's size.
absl::StatusOr<uint64_t> ReadFile(
    const std::string& path,
    const std::function<absl::Status(absl::string_view)>& consume) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  std::string buffer(kReadBytes, '\0');
  uint64_t size = 0;
  absl::Status status;
  while (true) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = Errno("cannot read", path);
      break;
    }
    if (n == 0) break;
    size += static_cast<uint64_t>(n);
    status = consume(absl::string_view(buffer.data(), static_cast<size_t>(n)));
    if (!status.ok()) break;
  }
  ::close(fd);
  if (!status.ok()) return status;
  return size;
}

// The file's damage, if any, as the error naming it.
absl::Status CheckFile(const std::string& path, const BackupFile& expected,
                       uint64_t size, const std::string& sha256) {
  if (size != expected.size) {
    return absl::DataLossError(
        absl::StrCat("backup file ", path, " is damaged: ", size,
                     " bytes, the manifest says ", expected.size));
  }
  if (sha256 != expected.sha256) {
    return absl::DataLossError(
        absl::StrCat("backup file ", path, " is damaged: its SHA-256 is ",
                     sha256, ", the manifest says ", expected.sha256));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Field(const Json& json, const char* name, T& out) {
  auto it = json.find(name);
  if (it == json.end()) {
    return absl::DataLossError(absl::StrCat("manifest: no \"", name, "\""));
  }
  try {
    out = it->get<T>();
  } catch (const Json::exception& e) {
    return absl::DataLossError(
        absl::StrCat("manifest: \"", name, "\": ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<BackupManifest> FromJson(const Json& json) {
  BackupManifest m;
  std::string format;
  absl::Status s = Field(json, "format", format);
  if (s.ok() && format != kBackupFormat) {
    return absl::DataLossError(absl::StrCat("manifest: format '", format,
                                            "', expected ", kBackupFormat));
  }
  for (absl::Status field :
       {Field(json, "data_format_version", m.data_format_version),
        Field(json, "mode", m.mode), Field(json, "node_id", m.node_id),
        Field(json, "applied_index", m.applied_index),
        Field(json, "term", m.term),
        Field(json, "estimated_records", m.estimated_records),
        Field(json, "created_at_ms", m.created_at_ms),
        Field(json, "dedup_version", m.dedup_version),
        Field(json, "git_sha", m.git_sha)}) {
    if (s.ok()) s = field;
  }
  Json members = Json::array();
  Json files = Json::array();
  if (s.ok()) s = Field(json, "members", members);
  if (s.ok()) s = Field(json, "files", files);
  if (!s.ok()) return s;
  for (const Json& j : members) {
    BackupMember member;
    for (absl::Status field :
         {Field(j, "id", member.id),
          Field(j, "raft_address", member.raft_address),
          Field(j, "client_address", member.client_address),
          Field(j, "role", member.role)}) {
      if (!field.ok()) return field;
    }
    m.members.push_back(std::move(member));
  }
  for (const Json& j : files) {
    BackupFile file;
    for (absl::Status field :
         {Field(j, "name", file.name), Field(j, "size", file.size),
          Field(j, "sha256", file.sha256)}) {
      if (!field.ok()) return field;
    }
    if (!PlainFileName(file.name) || file.name == kManifestFileName) {
      return absl::DataLossError(
          absl::StrCat("manifest: bad file name '", file.name, "'"));
    }
    m.files.push_back(std::move(file));
  }
  return m;
}

}  // namespace

struct Sha256::Context {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~Context() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : context_(std::make_unique<Context>()) {
  EVP_DigestInit_ex(context_->ctx, EVP_sha256(), nullptr);
}

Sha256::~Sha256() = default;

void Sha256::Update(absl::string_view bytes) {
  EVP_DigestUpdate(context_->ctx, bytes.data(), bytes.size());
}

std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(context_->ctx, digest, &length);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

bool PlainFileName(absl::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == absl::string_view::npos &&
         name.find('\0') == absl::string_view::npos;
}

std::string EncodeManifest(const BackupManifest& m) {
  Json members = Json::array();
  for (const BackupMember& member : m.members) {
    members.push_back({{"id", member.id},
                       {"raft_address", member.raft_address},
                       {"client_address", member.client_address},
                       {"role", member.role}});
  }
  Json files = Json::array();
  for (const BackupFile& file : m.files) {
    files.push_back(
        {{"name", file.name}, {"size", file.size}, {"sha256", file.sha256}});
  }
  const Json json = {
      {"format", kBackupFormat},
      {"data_format_version", m.data_format_version},
      {"mode", m.mode},
      {"node_id", m.node_id},
      {"applied_index", m.applied_index},
      {"term", m.term},
      {"members", members},
      {"estimated_records", m.estimated_records},
      {"created_at_ms", m.created_at_ms},
      {"created_at", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ",
                                      absl::FromUnixMillis(m.created_at_ms),
                                      absl::UTCTimeZone())},
      {"dedup_version", m.dedup_version},
      {"git_sha", m.git_sha},
      {"files", files}};
  return json.dump(2) + "\n";
}

absl::StatusOr<BackupManifest> DecodeManifest(absl::string_view text) {
  Json json = Json::parse(text.begin(), text.end(), nullptr,
                          /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::DataLossError("manifest: not a JSON object");
  }
  return FromJson(json);
}

absl::StatusOr<BackupManifest> VerifyBackup(const std::string& dir) {
  const std::string manifest_path = absl::StrCat(dir, "/", kManifestFileName);
  std::string text;
  absl::StatusOr<uint64_t> read =
      ReadFile(manifest_path, [&](absl::string_view bytes) {
        text.append(bytes.data(), bytes.size());
        return absl::OkStatus();
      });
  if (!read.ok()) {
    return absl::Status(
        read.status().code(),
        absl::StrCat("backup ", dir, " has no readable ", kManifestFileName,
                     " (", read.status().message(),
                     "): not a backup, or an unfinished one"));
  }
  absl::StatusOr<BackupManifest> manifest = DecodeManifest(text);
  if (!manifest.ok()) {
    return absl::DataLossError(
        absl::StrCat(manifest_path, ": ", manifest.status().message()));
  }
  for (const BackupFile& file : manifest->files) {
    const std::string path = absl::StrCat(dir, "/", file.name);
    Sha256 hash;
    absl::StatusOr<uint64_t> size = ReadFile(path, [&](absl::string_view b) {
      hash.Update(b);
      return absl::OkStatus();
    });
    if (!size.ok()) {
      if (absl::IsNotFound(size.status())) {
        return absl::NotFoundError(
            absl::StrCat("backup file ", path, " is missing"));
      }
      return size.status();
    }
    if (absl::Status s = CheckFile(path, file, *size, hash.HexDigest());
        !s.ok()) {
      return s;
    }
  }
  return manifest;
}

absl::StatusOr<std::unique_ptr<BackupWriter>> BackupWriter::Create(
    const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0) {
    if (errno != EEXIST) return Errno("cannot create", dir);
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, " exists and is not a directory"));
    }
    if (!fs::is_empty(dir, ec) || ec) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, " is not empty: back up into a new or empty directory"));
    }
  }
  return std::unique_ptr<BackupWriter>(new BackupWriter(dir));
}

BackupWriter::~BackupWriter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status BackupWriter::StartFile(const std::string& name, uint64_t size) {
  if (fd_ >= 0) {
    if (absl::Status s = CloseFile(); !s.ok()) return s;
  }
  if (!PlainFileName(name) || name == kManifestFileName) {
    return absl::DataLossError(absl::StrCat("bad file name '", name, "'"));
  }
  const std::string path = absl::StrCat(dir_, "/", name);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd_ < 0) return Errno("cannot create", path);
  current_ = BackupFile{name, size, ""};
  written_ = 0;
  hash_ = std::make_unique<Sha256>();
  return absl::OkStatus();
}

absl::Status BackupWriter::Append(absl::string_view data) {
  if (fd_ < 0) return absl::FailedPreconditionError("no file started");
  if (written_ + data.size() > current_.size) {
    return absl::DataLossError(absl::StrCat(
        current_.name, ": more bytes than its size ", current_.size));
  }
  const std::string path = absl::StrCat(dir_, "/", current_.name);
  if (absl::Status s = WriteAll(fd_, data, path); !s.ok()) return s;
  hash_->Update(data);
  written_ += data.size();
  bytes_ += data.size();
  return absl::OkStatus();
}

absl::Status BackupWriter::CloseFile() {
  const std::string path = absl::StrCat(dir_, "/", current_.name);
  if (written_ != current_.size) {
    return absl::DataLossError(absl::StrCat(path, ": received ", written_,
                                            " of ", current_.size, " bytes"));
  }
  const int fd = fd_;
  fd_ = -1;
  if (absl::Status s = SyncAndClose(fd, path); !s.ok()) return s;
  current_.sha256 = hash_->HexDigest();
  files_.push_back(current_);
  return absl::OkStatus();
}

absl::Status BackupWriter::Finish(BackupManifest manifest) {
  if (fd_ >= 0) {
    if (absl::Status s = CloseFile(); !s.ok()) return s;
  }
  if (files_.empty()) return absl::DataLossError("the backup holds no file");
  manifest.files = files_;
  // The files' names first, then the manifest's: a manifest never names a
  // file that a power cut could take away.
  if (absl::Status s = SyncDirectory(dir_); !s.ok()) return s;
  const std::string path = absl::StrCat(dir_, "/", kManifestFileName);
  const std::string temporary = path + ".tmp";
  const int fd =
      ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create", temporary);
  if (absl::Status s = WriteAll(fd, EncodeManifest(manifest), temporary);
      !s.ok()) {
    ::close(fd);
    return s;
  }
  if (absl::Status s = SyncAndClose(fd, temporary); !s.ok()) return s;
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    return Errno("cannot rename to", path);
  }
  return SyncDirectory(dir_);
}

absl::Status CopyBackupFile(const std::string& from, const std::string& to,
                            const BackupFile& expected) {
  const int fd =
      ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", to);
  Sha256 hash;
  absl::StatusOr<uint64_t> size = ReadFile(from, [&](absl::string_view bytes) {
    hash.Update(bytes);
    return WriteAll(fd, bytes, to);
  });
  if (!size.ok()) {
    ::close(fd);
    return size.status();
  }
  if (absl::Status s = SyncAndClose(fd, to); !s.ok()) return s;
  return CheckFile(from, expected, *size, hash.HexDigest());
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", dir);
  if (::fsync(fd) != 0) {
    absl::Status s = Errno("cannot fsync", dir);
    ::close(fd);
    return s;
  }
  ::close(fd);
  return absl::OkStatus();
}

}  // namespace dedup
