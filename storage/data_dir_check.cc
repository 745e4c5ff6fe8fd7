#include "storage/data_dir_check.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rocksdb/env.h"
#include "rocksdb/sst_file_reader.h"
#include "storage/db_options.h"
#include "storage/durable_dir.h"

namespace dedup {
namespace {

constexpr absl::string_view kRestoreOrStartEmpty =
    "Restore the data dir from a backup or a replica; to start empty instead, "
    "move the directory away.";

// What a data dir holds, by RocksDB's file names.
struct DirContents {
  bool has_current = false;
  bool has_marker = false;
  std::vector<std::string> manifests;
  std::vector<std::string> tables;    // *.sst
  std::map<uint64_t, uint64_t> wals;  // number -> size
};

DirContents ListDir(const std::string& path) {
  DirContents contents;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
    const std::string name = entry.path().filename().string();
    if (name == "CURRENT") {
      contents.has_current = true;
    } else if (name == kDurableMarkerName) {
      contents.has_marker = true;
    } else if (absl::StartsWith(name, "MANIFEST-")) {
      contents.manifests.push_back(name);
    } else if (absl::EndsWith(name, ".sst")) {
      contents.tables.push_back(name);
    } else if (absl::EndsWith(name, ".log")) {
      uint64_t number = 0;
      std::error_code size_error;
      const uintmax_t size = entry.file_size(size_error);
      if (absl::SimpleAtoi(name.substr(0, name.size() - 4), &number)) {
        contents.wals[number] = size_error ? 0 : size;
      }
    }
  }
  std::sort(contents.tables.begin(), contents.tables.end());
  return contents;
}

std::string WalName(uint64_t number) {
  return absl::StrFormat("%06u.log", number);
}

std::string DescribeWals(const DirContents& contents) {
  if (contents.wals.empty()) return "no WAL file";
  std::vector<std::string> wals;
  for (const auto& [number, size] : contents.wals) {
    wals.push_back(absl::StrCat(WalName(number), " (", size, " bytes)"));
  }
  return absl::StrCat("WAL files now: ", absl::StrJoin(wals, ", "));
}

absl::Status LostAcknowledgedWrites(const std::string& path,
                                    const std::string& what) {
  return absl::DataLossError(absl::StrCat(
      "data dir ", path, " has lost acknowledged writes: ", what,
      ". Restore the data dir from a backup or a replica; to start with what "
      "is left, accepting the loss, delete ",
      path, "/", kDurableMarkerName, "."));
}

// Each table file opened and checked on its own: the damaged ones, with
// what is wrong with each.
std::vector<std::string> DamagedTables(const rocksdb::Options& options,
                                       const std::string& path,
                                       const DirContents& contents) {
  std::vector<std::string> damaged;
  for (const std::string& name : contents.tables) {
    const std::string file = absl::StrCat(path, "/", name);
    rocksdb::SstFileReader reader(options);
    rocksdb::Status s = reader.Open(file);
    if (s.ok()) {
      rocksdb::ReadOptions read;
      read.fill_cache = false;
      read.readahead_size = 2 << 20;
      s = reader.VerifyChecksum(read);
    }
    if (!s.ok()) damaged.push_back(absl::StrCat(file, ": ", s.ToString()));
  }
  return damaged;
}

absl::Status DamagedTablesError(const std::string& path,
                                const std::vector<std::string>& damaged) {
  return absl::DataLossError(absl::StrCat(
      "data dir ", path, " is damaged: table file ",
      absl::StrJoin(damaged, "; table file "),
      "; the records in it cannot be read. ", kRestoreOrStartEmpty));
}

// Held while the directory is checked, so that another dedupd cannot be
// writing it meanwhile (a read-only open takes no lock). Released before the
// database itself is opened, which takes it again.
class DirLock {
 public:
  static absl::StatusOr<DirLock> Take(const std::string& path) {
    rocksdb::FileLock* lock = nullptr;
    rocksdb::Status s =
        rocksdb::Env::Default()->LockFile(absl::StrCat(path, "/LOCK"), &lock);
    if (!s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data dir ", path,
          " is locked by another process (is another dedupd running on it?): ",
          s.ToString()));
    }
    return DirLock(lock);
  }
  DirLock(DirLock&& other) : lock_(std::exchange(other.lock_, nullptr)) {}
  DirLock& operator=(DirLock&&) = delete;
  ~DirLock() {
    if (lock_ != nullptr) (void)rocksdb::Env::Default()->UnlockFile(lock_);
  }

 private:
  explicit DirLock(rocksdb::FileLock* lock) : lock_(lock) {}
  rocksdb::FileLock* lock_;
};

// Opens the database read-only and checks it as described in the header.
absl::Status CheckReadOnly(const std::string& path, const DirContents& contents,
                           const std::optional<DurableMark>& mark,
                           bool verify_data) {
  // Its own small cache: nothing read here is worth keeping.
  RecordDbTuning tuning;
  tuning.memory_budget_bytes = 16 << 20;
  rocksdb::Options options = RecordDbOptions(tuning);
  options.create_if_missing = false;
  // VerifyChecksum opens each table again without its unique id, and RocksDB
  // warns about that once per process: errors only.
  options.info_log->SetInfoLogLevel(rocksdb::InfoLogLevel::ERROR_LEVEL);
  options.info_log_level = rocksdb::InfoLogLevel::ERROR_LEVEL;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(options, path, &raw);
  if (!s.ok()) {
    if (s.IsCorruption() || s.IsIOError()) {
      std::vector<std::string> damaged = DamagedTables(options, path, contents);
      if (!damaged.empty()) return DamagedTablesError(path, damaged);
    }
    return absl::DataLossError(absl::StrCat(
        "cannot open data dir ", path, ": ", s.ToString(),
        ". The data dir is damaged or incomplete. ", kRestoreOrStartEmpty));
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  if (mark.has_value()) {
    uint64_t min_wal_to_keep = 0;
    const bool known = db->GetIntProperty(
        rocksdb::DB::Properties::kMinLogNumberToKeep, &min_wal_to_keep);
    // The WAL the last sync covered holds acknowledged writes unless a
    // flush has put them all in table files since.
    if (mark->wal_number != 0 && known && mark->wal_number >= min_wal_to_keep) {
      const auto wal = contents.wals.find(mark->wal_number);
      const std::string file =
          absl::StrCat(path, "/", WalName(mark->wal_number));
      if (wal == contents.wals.end()) {
        return LostAcknowledgedWrites(
            path, absl::StrCat("the write-ahead log ", file,
                               ", which holds acknowledged writes not yet in "
                               "any table file, is missing (",
                               DescribeWals(contents), ")"));
      }
      if (wal->second < mark->wal_bytes) {
        return LostAcknowledgedWrites(
            path,
            absl::StrCat("the write-ahead log ", file, " is ", wal->second,
                         " bytes, but its first ", mark->wal_bytes,
                         " bytes were synced (acknowledged writes): "
                         "it was cut short"));
      }
    }
    const uint64_t recovered = db->GetLatestSequenceNumber();
    if (recovered < mark->sequence) {
      return LostAcknowledgedWrites(
          path,
          absl::StrCat("writes up to RocksDB sequence number ", mark->sequence,
                       " were durable (", path, "/", kDurableMarkerName,
                       "), but the database recovers only up to ", recovered,
                       ": a write-ahead log is damaged, cut short or missing (",
                       DescribeWals(contents), ")"));
    }
  }
  if (verify_data) {
    rocksdb::ReadOptions read;
    read.fill_cache = false;
    read.readahead_size = 2 << 20;
    s = db->VerifyChecksum(read);
    if (!s.ok()) {
      std::vector<std::string> damaged = DamagedTables(options, path, contents);
      if (damaged.empty()) damaged.push_back(s.ToString());
      return DamagedTablesError(path, damaged);
    }
  }
  s = db->Close();
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open data dir ", path, ": ", s.ToString()));
  }
  return absl::OkStatus();
}

absl::Status CheckCurrentMissing(const std::string& path,
                                 const DirContents& contents) {
  std::vector<std::string> found = contents.manifests;
  if (!contents.tables.empty()) {
    found.push_back(absl::StrCat(contents.tables.size(), " table file(s)"));
  }
  for (const auto& [number, size] : contents.wals) {
    found.push_back(WalName(number));
  }
  if (contents.has_marker) found.push_back(kDurableMarkerName);
  if (found.empty()) return absl::OkStatus();  // a new directory
  return absl::DataLossError(absl::StrCat(
      "data dir ", path, " holds a database (", absl::StrJoin(found, ", "),
      ") but its CURRENT file is missing, so RocksDB cannot tell which state "
      "is current and would start an empty one beside it. ",
      kRestoreOrStartEmpty));
}

}  // namespace

absl::StatusOr<CheckedRecordDb> OpenCheckedRecordDb(
    const rocksdb::Options& options, const std::string& path,
    bool verify_data) {
  const DirContents contents = ListDir(path);
  absl::StatusOr<std::optional<DurableMark>> mark = DurableMarker::Read(path);
  if (!mark.ok()) return mark.status();
  rocksdb::Options open_options = options;
  if (!contents.has_current) {
    if (absl::Status s = CheckCurrentMissing(path, contents); !s.ok()) {
      return s;
    }
    open_options.create_if_missing = true;
    // (RocksDB would too, after logging an error about the missing dir, and
    // without syncing its parent.)
    if (absl::Status s = CreateDirectoriesDurably(path); !s.ok()) return s;
  } else {
    open_options.create_if_missing = false;
    absl::StatusOr<DirLock> lock = DirLock::Take(path);
    if (!lock.ok()) return lock.status();
    if (absl::Status s = CheckReadOnly(path, contents, *mark, verify_data);
        !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<std::unique_ptr<rocksdb::DB>> db =
      OpenRecordDb(open_options, path);
  if (!db.ok()) return db.status();
  DurableMark opened{(*db)->GetLatestSequenceNumber()};
  std::unique_ptr<rocksdb::LogFile> wal;
  if ((*db)->GetCurrentWalFile(&wal).ok() && wal != nullptr) {
    opened.wal_number = wal->LogNumber();
    opened.wal_bytes = wal->SizeFileBytes();
  }
  absl::StatusOr<std::unique_ptr<DurableMarker>> marker =
      DurableMarker::Create(path, opened);
  if (!marker.ok()) return marker.status();
  return CheckedRecordDb{*std::move(db), *std::move(marker)};
}

}  // namespace dedup
