// Shard::Batch, the unit of one shard cycle. Private to the shard: included
// only by shard.cc.
#ifndef DEDUP_STORAGE_SHARD_BATCH_H_
#define DEDUP_STORAGE_SHARD_BATCH_H_

#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "storage/authority.h"
#include "storage/namespace_bytes.h"
#include "storage/record.h"
#include "storage/shard.h"

namespace dedup {

// Gives `done` its decided `answer`, unless the write or sync that the
// answer waited for failed: then that error, since the decision may be lost.
template <typename T>
void DeliverUnlessFailed(StoreCallback<T> done, absl::StatusOr<T> answer,
                         const absl::Status& durable) {
  if (!durable.ok() && answer.ok()) {
    std::move(done)(durable);
  } else {
    std::move(done)(std::move(answer));
  }
}

// The operations of one shard cycle: their reads see the batch's own earlier
// writes, their writes go out in one RocksDB write, and their answers are
// held until that write is done.
class Shard::Batch {
 public:
  enum class Mode {
    kShardThread,
    kInlineReadOnly,     // on a caller's thread, memory reads, no writes
    kInlineMemoryWrite,  // on a caller's thread, memory reads and writes
  };
  // `wal_io_mu`: held shared while writing (see ShardContext); may be null.
  Batch(rocksdb::DB* db, Mode mode, absl::Mutex* wal_io_mu = nullptr)
      : db_(db), mode_(mode), wal_io_mu_(wal_io_mu) {
    // An inline batch must never wait for the disk: reads that would need
    // it come back Incomplete and the operation goes to the shard thread.
    if (mode_ != Mode::kShardThread) {
      read_options_.read_tier = rocksdb::kBlockCacheTier;
    }
  }

  bool is_inline() const { return mode_ != Mode::kShardThread; }
  bool may_write() const { return mode_ != Mode::kInlineReadOnly; }
  // An inline batch found it cannot finish on the caller's thread; it is
  // then discarded unanswered.
  bool refused() const { return refused_; }
  void Refuse() { refused_ = true; }

  absl::StatusOr<std::optional<Record>> Read(const std::string& skey) {
    std::optional<std::string> value;
    if (absl::Status s = ReadValue(skey, &value); !s.ok()) return s;
    if (!value.has_value()) return std::optional<Record>();
    absl::StatusOr<Record> record = DecodeRecord(*value);
    if (!record.ok()) return record.status();
    return std::optional<Record>(*std::move(record));
  }

  // What ReadLeavingResult finds: a completed record without its result,
  // which stays in the encoded value until asked for.
  struct Found {
    std::optional<Record> record;  // nullopt: no record
    std::string value;             // the encoded record
    size_t result_offset = 0;      // of a completed record's result in value
    size_t result_size = 0;
    std::string Result() const {
      return value.substr(result_offset, result_size);
    }
  };

  // Read, leaving a completed record's result out of `record`: a Begin
  // decides without it, and a DUPLICATE that its result budget refuses
  // never copies it.
  absl::StatusOr<Found> ReadLeavingResult(const std::string& skey) {
    Found found;
    std::optional<std::string> value;
    if (absl::Status s = ReadValue(skey, &value); !s.ok()) return s;
    if (!value.has_value()) return found;
    found.value = *std::move(value);
    absl::StatusOr<RecordView> view = DecodeRecordView(found.value);
    if (!view.ok()) return view.status();
    found.record = std::move(view->record);
    if (found.record->state == RecordState::kCompleted) {
      found.result_offset =
          static_cast<size_t>(view->result.data() - found.value.data());
      found.result_size = view->result.size();
    } else {
      found.record->result = std::string(view->result);
    }
    return found;
  }

  // Queues the write and returns the key as the batch keeps it (stable until
  // the batch ends), or nullptr for kNone. Takes `skey` by value: callers
  // done with theirs move it in.
  const std::string* Apply(std::string skey, WriteKind kind,
                           const Record& record) {
    std::optional<std::string> value;
    if (kind != WriteKind::kNone && mode_ == Mode::kInlineReadOnly) Refuse();
    switch (kind) {
      case WriteKind::kNone:
        return nullptr;
      case WriteKind::kPut:
        value = EncodeRecord(record);
        batch_.Put(skey, *value);
        break;
      case WriteKind::kDelete:
        batch_.Delete(skey);
        break;
    }
    writes_.push_back(Write{std::move(skey), std::move(value)});
    // The map's key views the deque's string, which never moves.
    latest_.insert_or_assign(absl::string_view(writes_.back().skey),
                             writes_.size() - 1);
    return &writes_.back().skey;
  }

  template <typename T, typename R>
  void Answer(StoreCallback<T> done, R&& value) {
    absl::StatusOr<T> result(std::forward<R>(value));
    completions_.push_back([done = std::move(done), result = std::move(result)](
                               const absl::Status& write_status) mutable {
      DeliverUnlessFailed(std::move(done), std::move(result), write_status);
    });
  }

  absl::Status Commit(rocksdb::WriteOptions options) {
    if (batch_.Count() == 0) return absl::OkStatus();
    // Inline, a write stall refuses the batch instead of blocking, and so
    // does a WAL sync in progress.
    options.no_slowdown = is_inline();
    rocksdb::Status s;
    if (wal_io_mu_ == nullptr) {
      s = db_->Write(options, &batch_);
    } else if (is_inline()) {
      if (!wal_io_mu_->ReaderTryLock()) {
        Refuse();
        return absl::UnavailableError("WAL sync in progress");
      }
      s = db_->Write(options, &batch_);
      wal_io_mu_->ReaderUnlock();
    } else {
      absl::ReaderMutexLock io(wal_io_mu_);
      s = db_->Write(options, &batch_);
    }
    write_status_ = s;
    if (s.ok()) return absl::OkStatus();
    if (s.IsIncomplete() && is_inline()) Refuse();
    return absl::UnavailableError(
        absl::StrCat("storage write: ", s.ToString()));
  }

  // Calls fn(skey, value) once per key written, with its final encoded
  // record (nullptr: deleted).
  template <typename Fn>
  void ForEachFinalWrite(Fn fn) const {
    for (const auto& [skey, index] : latest_) {
      const std::optional<std::string>& value = writes_[index].value;
      fn(skey, value.has_value() ? &*value : nullptr);
    }
  }
  // Calls fn(skey, delta) once per key written: the bytes its final write
  // stores less those its first read found (namespace_bytes.h).
  template <typename Fn>
  void ForEachStoredBytesChange(Fn fn) const {
    for (const auto& [skey, index] : latest_) {
      const std::optional<std::string>& value = writes_[index].value;
      const int64_t now =
          value.has_value() ? StoredRecordBytes(skey, *value) : 0;
      auto before = stored_bytes_.find(KeyId(skey));
      // Every write follows a read of its key; a write without one would
      // count as new.
      fn(skey, now - (before == stored_bytes_.end() ? 0 : before->second));
    }
  }
  int write_count() const { return batch_.Count(); }
  // What RocksDB answered the write (OK before Commit).
  const rocksdb::Status& write_status() const { return write_status_; }

  void RunCompletions(const absl::Status& write_status) {
    RunAll(completions_, write_status);
    completions_.clear();
  }
  // The answers, to run later with RunAll.
  using Completions =
      std::vector<absl::AnyInvocable<void(const absl::Status&) &&>>;
  Completions TakeCompletions() { return std::move(completions_); }
  static void RunAll(Completions& completions, const absl::Status& status) {
    for (auto& completion : completions) std::move(completion)(status);
  }

 private:
  struct Write {
    std::string skey;
    std::optional<std::string> value;  // encoded record; nullopt: delete
  };

  // The encoded record at `skey` as this batch sees it (its own writes
  // first); *value is nullopt when there is none.
  absl::Status ReadValue(const std::string& skey,
                         std::optional<std::string>* value) {
    if (auto it = latest_.find(skey); it != latest_.end()) {
      *value = writes_[it->second].value;
      return absl::OkStatus();
    }
    std::string stored;
    rocksdb::Status s = db_->Get(read_options_, skey, &stored);
    if (s.IsNotFound()) {
      stored_bytes_.try_emplace(KeyId(skey), 0);
      value->reset();
      return absl::OkStatus();
    }
    if (s.IsIncomplete() && is_inline()) Refuse();
    if (!s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("storage read: ", s.ToString()));
    }
    stored_bytes_.try_emplace(KeyId(skey), StoredRecordBytes(skey, stored));
    *value = std::move(stored);
    return absl::OkStatus();
  }

  rocksdb::DB* const db_;
  const Mode mode_;
  absl::Mutex* const wal_io_mu_;
  rocksdb::ReadOptions read_options_;
  bool refused_ = false;
  rocksdb::WriteBatch batch_;
  rocksdb::Status write_status_;
  std::deque<Write> writes_;
  absl::flat_hash_map<absl::string_view, size_t> latest_;  // into writes_
  // Keys by a 64-bit hash, as in LeaseTracker: no copy of each key read.
  static uint64_t KeyId(absl::string_view skey) {
    return absl::Hash<absl::string_view>{}(skey);
  }
  // Per key read from the database: the bytes it held before this batch.
  absl::flat_hash_map<uint64_t, int64_t> stored_bytes_;
  Completions completions_;
};

}  // namespace dedup

#endif  // DEDUP_STORAGE_SHARD_BATCH_H_
