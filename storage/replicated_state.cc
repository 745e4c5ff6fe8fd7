#include "storage/replicated_state.h"

#include <algorithm>
#include <map>
#include <thread>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/db.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"
#include "storage/coding.h"
#include "storage/db_options.h"
#include "storage/entry_batch.h"
#include "storage/lease_tracker.h"
#include "storage/replicated_meta.h"
#include "storage/replicated_ops.h"
#include "storage/rocks_util.h"
#include "storage/state_dir_swap.h"
#include "storage/storage_key.h"
#include "storage/ttl_compaction_filter.h"

namespace dedup {
namespace {

using replicated_internal::AppliedIndexKey;
using replicated_internal::ApplyOp;
using replicated_internal::EncodeU64;
using replicated_internal::FenceKey;
using replicated_internal::kMetaKeys;
using replicated_internal::MemberKeyPrefix;
using replicated_internal::NowKey;
using replicated_internal::OpContext;
using replicated_internal::ReadMeta;
using replicated_internal::ShardMapEpochKey;
using replicated_internal::ShardMapKey;

class AppliedClock : public Clock {
 public:
  int64_t NowMillis() const override { return now_ms.load(); }
  std::atomic<int64_t> now_ms{0};
};

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

void FnvMix(uint64_t& h, absl::string_view bytes) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= kFnvPrime;
  }
}
void FnvMixSized(uint64_t& h, absl::string_view bytes) {
  FnvMix(h, EncodeU64(bytes.size()));
  FnvMix(h, bytes);
}

class AdmitAll : public ResultGate {
 public:
  absl::Status Admit(size_t, size_t) override { return absl::OkStatus(); }
};

class RocksReplicatedState : public ReplicatedState {
 public:
  explicit RocksReplicatedState(ReplicatedStateOptions options)
      : options_(std::move(options)),
        filter_(&clock_, options_.compaction_grace_ms),
        leases_(options_.max_tracked_leases),
        stored_bytes_(/*writers=*/1, options_.max_tracked_namespaces) {}

  ~RocksReplicatedState() override { (void)Close(); }

  absl::Status Init() {
    if (absl::Status s = RecoverStateDir(options_.path); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot recover data dir ", options_.path, ": ", s.message()));
    }
    {
      absl::WriterMutexLock lock(&db_mu_);
      if (absl::Status s = OpenDb(); !s.ok()) return s;
    }
    StartSeeding();
    return absl::OkStatus();
  }

  std::string IncomingDir() const override {
    return IncomingDirOf(options_.path);
  }

  absl::Status ReplaceWith(const std::string& incoming) override {
    StopSeeding();
    {
      absl::WriterMutexLock lock(&db_mu_);
      if (closed_) return absl::UnavailableError("state is closed");
      filter_.CountDrops(nullptr, nullptr);
      if (absl::Status s = FromRocks(db_->Close(), "close"); !s.ok()) return s;
      db_.reset();
      if (absl::Status s = SwapInStateDir(incoming, options_.path); !s.ok()) {
        return s;
      }
      if (absl::Status s = OpenDb(); !s.ok()) return s;
    }
    StartSeeding();
    return absl::OkStatus();
  }

  absl::StatusOr<AppliedEntry> Apply(uint64_t index, const LogEntry& entry,
                                     ResultGate* gate) override {
    absl::ReaderMutexLock lock(&db_mu_);
    if (closed_) return absl::UnavailableError("state is closed");
    AppliedEntry out;
    const int64_t prior_now = clock_.now_ms.load();
    out.now_ms = std::max(entry.now_ms, prior_now);
    if (index <= applied_.load()) {
      out.skipped = true;
      return out;
    }
    const int64_t now = out.now_ms;
    uint64_t fence = fence_.load();
    const uint64_t first_fence = fence;
    EntryBatch batch(db_.get(), entry.ops, /*read_gets=*/gate != nullptr);
    if (gate != nullptr) out.answers.reserve(entry.ops.size());
    uint64_t result_bytes = 0;
    uint64_t map_epoch = map_epoch_.load();
    const uint64_t first_map_epoch = map_epoch;
    OpContext context{now, fence, batch, gate, out, result_bytes, map_epoch};
    for (size_t i = 0; i < entry.ops.size(); ++i) {
      if (absl::Status s = ApplyOp(entry.ops[i], i, context); !s.ok()) {
        return s;
      }
    }
    result_bytes_answered_.fetch_add(result_bytes);
    out.held_record_bytes = batch.held_bytes();
    rocksdb::WriteBatch& wb = batch.Finish();
    wb.Put(AppliedIndexKey(), EncodeU64(index));
    if (now != prior_now) wb.Put(NowKey(), EncodeU64(now));
    if (fence != first_fence) wb.Put(FenceKey(), EncodeU64(fence));
    if (map_epoch != first_map_epoch) {
      wb.Put(ShardMapEpochKey(), EncodeU64(map_epoch));
    }
    // Unsynced: the Raft log is what makes an entry durable (see header).
    const rocksdb::WriteOptions write;
    if (absl::Status s = FromRocks(db_->Write(write, &wb), "storage write");
        !s.ok()) {
      return s;
    }
    leases_.OnWrites(batch.Writes(), now);
    batch.ForEachStoredBytesChange(
        [this](absl::string_view skey, int64_t delta) {
          stored_bytes_.writer(0).AddRecord(skey, delta);
        });
    fence_.store(fence);
    map_epoch_.store(map_epoch);
    clock_.now_ms.store(now);
    applied_.store(index);
    return out;
  }

  uint64_t applied_index() const override { return applied_.load(); }
  int64_t now_ms() const override { return clock_.now_ms.load(); }
  const Clock* clock() const override { return &clock_; }
  uint64_t last_fence() const override { return fence_.load(); }
  uint64_t result_bytes_answered() const override {
    return result_bytes_answered_.load();
  }

  absl::StatusOr<uint64_t> SyncWal() override {
    absl::ReaderMutexLock lock(&db_mu_);
    if (closed_) return absl::UnavailableError("state is closed");
    const uint64_t covered = applied_.load();
    if (absl::Status s = FromRocks(db_->SyncWAL(), "sync WAL"); !s.ok()) {
      return s;
    }
    return covered;
  }

  absl::StatusOr<uint64_t> Checkpoint(const std::string& dir) override {
    absl::ReaderMutexLock lock(&db_mu_);
    if (closed_) return absl::UnavailableError("state is closed");
    rocksdb::Checkpoint* raw = nullptr;
    if (absl::Status s = FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw),
                                   "checkpoint");
        !s.ok()) {
      return s;
    }
    std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
    // log_size_for_flush 0: memtables are flushed into the copy. Apply may
    // go on meanwhile: the copy is consistent at some entry, which the
    // copy itself records.
    if (absl::Status s =
            FromRocks(checkpoint->CreateCheckpoint(dir, 0), "checkpoint");
        !s.ok()) {
      return s;
    }
    return AppliedIndexOf(dir);
  }

  absl::StatusOr<StoredShardMap> ShardMap() override {
    absl::ReaderMutexLock lock(&db_mu_);
    if (closed_) return absl::UnavailableError("state is closed");
    const rocksdb::Snapshot* snapshot = db_->GetSnapshot();
    rocksdb::ReadOptions read;
    read.snapshot = snapshot;
    StoredShardMap stored;
    absl::StatusOr<uint64_t> epoch =
        ReadMeta(db_.get(), read, ShardMapEpochKey());
    rocksdb::Status got = db_->Get(read, ShardMapKey(), &stored.map);
    db_->ReleaseSnapshot(snapshot);
    if (!epoch.ok()) return epoch.status();
    if (!got.ok() && !got.IsNotFound()) return FromRocks(got, "shard map");
    stored.epoch = *epoch;
    return stored;
  }

  absl::StatusOr<std::map<uint64_t, std::string>> Members() override {
    absl::ReaderMutexLock lock(&db_mu_);
    if (closed_) return absl::UnavailableError("state is closed");
    std::map<uint64_t, std::string> members;
    const std::string prefix = MemberKeyPrefix();
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(TotalOrderScan()));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
         it->Next()) {
      const absl::string_view key(it->key().data(), it->key().size());
      if (key.size() != prefix.size() + 8) continue;
      members[DecodeBigEndian64(key.data() + prefix.size())] =
          it->value().ToString();
    }
    if (absl::Status s = FromRocks(it->status(), "members scan"); !s.ok()) {
      return s;
    }
    return members;
  }

  absl::StatusOr<StateDigest> ComputeDigest() override {
    absl::ReaderMutexLock lock(&db_mu_);
    if (closed_) return absl::UnavailableError("state is closed");
    const rocksdb::Snapshot* snapshot = db_->GetSnapshot();
    rocksdb::ReadOptions read = TotalOrderScan();
    read.snapshot = snapshot;
    StateDigest digest;
    absl::Status status =
        [&]() ABSL_SHARED_LOCKS_REQUIRED(db_mu_) -> absl::Status {
      absl::StatusOr<uint64_t> applied =
          ReadMeta(db_.get(), read, AppliedIndexKey());
      absl::StatusOr<uint64_t> now = ReadMeta(db_.get(), read, NowKey());
      if (!applied.ok()) return applied.status();
      if (!now.ok()) return now.status();
      digest.applied_index = *applied;
      digest.now_ms = static_cast<int64_t>(*now);
      uint64_t h = kFnvOffset;
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        const absl::string_view key(it->key().data(), it->key().size());
        const absl::string_view value(it->value().data(), it->value().size());
        std::string tombstone;
        absl::string_view hashed = value;
        if (IsRecordKey(key)) {
          std::optional<int64_t> expire_at = PeekExpireAt(value);
          std::optional<int64_t> drop_at = PeekDropAt(value);
          if (drop_at.has_value() && digest.now_ms >= *drop_at) continue;
          if (expire_at.has_value() && digest.now_ms >= *expire_at) {
            // A retained tombstone: compactions shrink it on each replica
            // at its own time, so its canonical form is what is compared.
            absl::StatusOr<Record> record = DecodeRecord(value);
            if (record.ok()) {
              tombstone = EncodeRecord(TombstoneOf(*record));
              hashed = tombstone;
            }
          } else {
            ++digest.live_records;
          }
        }
        FnvMixSized(h, key);
        FnvMixSized(h, hashed);
      }
      digest.hash = h;
      return FromRocks(it->status(), "digest scan");
    }();
    db_->ReleaseSnapshot(snapshot);
    if (!status.ok()) return status;
    return digest;
  }

  StoreStats Stats() override {
    StoreStats stats;
    absl::ReaderMutexLock lock(&db_mu_);
    if (closed_) return stats;
    auto property = [this](const char* name)
                        ABSL_SHARED_LOCKS_REQUIRED(db_mu_) -> uint64_t {
      uint64_t value = 0;
      return db_->GetIntProperty(name, &value) ? value : 0;
    };
    const uint64_t keys = property("rocksdb.estimate-num-keys");
    stats.estimated_records = keys > kMetaKeys ? keys - kMetaKeys : 0;
    stats.live_sst_bytes = property("rocksdb.live-sst-files-size");
    stats.pending_compaction_bytes =
        property("rocksdb.estimate-pending-compaction-bytes");
    stats.block_cache_usage_bytes = property("rocksdb.block-cache-usage");
    stats.memtable_bytes = property("rocksdb.cur-size-all-mem-tables");
    stats.expired_dropped = filter_.dropped();
    stats.tombstones_dropped = filter_.tombstones_dropped();
    stats.tombstones_made = filter_.tombstones_made();
    leases_.AddStats(clock_.now_ms.load(), stats);
    return stats;
  }

  StoredBytes StoredBytesByNamespace() const override {
    if (closed_.load()) return StoredBytes();
    return stored_bytes_.Snapshot();
  }

  absl::Status CompactAll() override {
    absl::ReaderMutexLock lock(&db_mu_);
    if (closed_) return absl::UnavailableError("state is closed");
    rocksdb::CompactRangeOptions options;
    options.bottommost_level_compaction =
        rocksdb::BottommostLevelCompaction::kForce;
    return FromRocks(db_->CompactRange(options, nullptr, nullptr), "compact");
  }

  absl::StatusOr<uint64_t> CountStoredRecords() override {
    absl::ReaderMutexLock lock(&db_mu_);
    if (closed_) return absl::UnavailableError("state is closed");
    return CountRecordsInDb(*db_);
  }

  absl::Status Close() override {
    StopSeeding();
    absl::WriterMutexLock lock(&db_mu_);
    if (closed_) return absl::OkStatus();
    closed_ = true;
    if (db_ == nullptr) return absl::OkStatus();
    filter_.CountDrops(nullptr, nullptr);
    // A clean stop leaves nothing for the log to replay.
    absl::Status status = FromRocks(db_->SyncWAL(), "sync WAL");
    absl::Status close = FromRocks(db_->Close(), "close");
    db_.reset();
    return status.ok() ? close : status;
  }

 private:
  // One pass over the records after an open, reading only their headers, so
  // lease statistics need no scan per scrape. Runs on seeder_ while entries
  // apply (LeaseTracker: their writes win).
  // The scan's view is taken here, before any later entry applies: the
  // bytes per namespace count every change from exactly that view on.
  void StartSeeding() {
    leases_.BeginSeeding();
    std::unique_ptr<rocksdb::Iterator> scan;
    {
      absl::ReaderMutexLock lock(&db_mu_);
      if (!closed_ && db_ != nullptr) {
        scan = NewRecordScan(db_.get());
        stored_bytes_.BeginScan();
        filter_.CountDrops(db_.get(), &stored_bytes_.dropped());
      }
    }
    seeder_ = std::thread([this, scan = std::move(scan)]() mutable {
      SeedLeases(std::move(scan));
    });
  }

  // Not with db_mu_ held: the scan holds it shared until it sees the flag.
  void StopSeeding() {
    stop_seeding_.store(true);
    if (seeder_.joinable()) seeder_.join();
    stop_seeding_.store(false);
  }

  void SeedLeases(std::unique_ptr<rocksdb::Iterator> scan) {
    absl::ReaderMutexLock lock(&db_mu_);
    if (closed_ || db_ == nullptr || scan == nullptr) {
      scan.reset();  // before the database goes
      leases_.FinishSeeding(false);
      stored_bytes_.FinishScan(false);
      return;
    }
    const int64_t now_ms = clock_.now_ms.load();
    NamespaceBytes& scanned_bytes = stored_bytes_.scanned();
    const bool complete = ScanRecordsForLeases(
        std::move(scan), stop_seeding_,
        [&](absl::string_view skey, absl::string_view value) {
          leases_.Seed(skey, value, now_ms);
          scanned_bytes.AddRecord(skey, StoredRecordBytes(skey, value));
        });
    leases_.FinishSeeding(complete);
    stored_bytes_.FinishScan(complete);
  }

  // Opens the database at options_.path and loads the metadata.
  absl::Status OpenDb() ABSL_EXCLUSIVE_LOCKS_REQUIRED(db_mu_) {
    RecordDbTuning tuning;
    tuning.memory_budget_bytes = options_.memory_budget_bytes;
    tuning.periodic_compaction_s = options_.periodic_compaction_s;
    tuning.compaction_filter = &filter_;
    // Until the replicated clock is read below, the filter sees time 0 and
    // drops nothing.
    clock_.now_ms.store(0);
    rocksdb::Options db_options = RecordDbOptions(tuning);
    absl::StatusOr<std::unique_ptr<rocksdb::DB>> opened =
        OpenRecordDb(db_options, options_.path);
    if (!opened.ok()) return opened.status();
    db_ = *std::move(opened);
    rocksdb::DB* const db = db_.get();
    const rocksdb::ReadOptions read;
    absl::StatusOr<uint64_t> applied = ReadMeta(db, read, AppliedIndexKey());
    absl::StatusOr<uint64_t> now = ReadMeta(db, read, NowKey());
    absl::StatusOr<uint64_t> fence = ReadMeta(db, read, FenceKey());
    absl::StatusOr<uint64_t> map_epoch = ReadMeta(db, read, ShardMapEpochKey());
    for (const auto* v : {&applied, &now, &fence, &map_epoch}) {
      if (!v->ok()) return v->status();
    }
    map_epoch_.store(*map_epoch);
    applied_.store(*applied);
    clock_.now_ms.store(static_cast<int64_t>(*now));
    fence_.store(*fence);
    return absl::OkStatus();
  }

  const ReplicatedStateOptions options_;
  AppliedClock clock_;
  TtlCompactionFilter filter_;
  // Held shared while the database is used, exclusively while it is
  // replaced (ReplaceWith) or closed.
  mutable absl::Mutex db_mu_;
  std::unique_ptr<rocksdb::DB> db_ ABSL_GUARDED_BY(db_mu_);
  std::atomic<uint64_t> applied_{0};
  std::atomic<uint64_t> fence_{0};
  std::atomic<uint64_t> map_epoch_{0};
  std::atomic<uint64_t> result_bytes_answered_{0};
  std::atomic<bool> closed_{false};
  LeaseTracker leases_;
  StoredBytesAccount stored_bytes_;
  std::thread seeder_;  // Init, ReplaceWith and Close start and join it
  std::atomic<bool> stop_seeding_{false};
};

}  // namespace

ResultGate* AdmitAllResults() {
  static ResultGate* const gate = new AdmitAll();
  return gate;
}

absl::StatusOr<std::unique_ptr<ReplicatedState>> ReplicatedState::Open(
    ReplicatedStateOptions options) {
  auto state = std::make_unique<RocksReplicatedState>(std::move(options));
  if (absl::Status s = state->Init(); !s.ok()) return s;
  return state;
}

absl::StatusOr<uint64_t> ReplicatedState::AppliedIndexOf(
    const std::string& dir) {
  rocksdb::Options options = RecordDbOptions(RecordDbTuning());
  options.create_if_missing = false;
  rocksdb::DB* raw = nullptr;
  if (absl::Status s = FromRocks(
          rocksdb::DB::OpenForReadOnly(options, dir, &raw), "open checkpoint");
      !s.ok()) {
    return s;
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  return ReadMeta(db.get(), rocksdb::ReadOptions(), AppliedIndexKey());
}

}  // namespace dedup
