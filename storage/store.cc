#include "storage/store.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "common/thread_name.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/utilities/checkpoint.h"
#include "storage/data_dir_check.h"
#include "storage/db_options.h"
#include "storage/durable_marker.h"
#include "storage/fence_allocator.h"
#include "storage/lease_tracker.h"
#include "storage/rocks_util.h"
#include "storage/shard.h"
#include "storage/storage_key.h"
#include "storage/ttl_compaction_filter.h"
#include "storage/wal_syncer.h"
#include "storage/write_health.h"

namespace dedup {
namespace {

// How shards write. Never synced: in kSync the WalSyncer fsyncs for them.
rocksdb::WriteOptions ShardWriteOptions(Durability durability) {
  rocksdb::WriteOptions options;
  options.disableWAL = durability == Durability::kNone;
  return options;
}

class RocksStore : public Store {
 public:
  RocksStore(StoreOptions options, std::unique_ptr<TtlCompactionFilter> filter,
             std::shared_ptr<WriteHealth> health)
      : options_(std::move(options)),
        filter_(std::move(filter)),
        health_(std::move(health)) {}

  ~RocksStore() override { (void)Close(); }

  absl::Status Init(rocksdb::Options db_options) {
    absl::StatusOr<CheckedRecordDb> opened = OpenCheckedRecordDb(
        db_options, options_.path, options_.verify_data_at_open);
    if (!opened.ok()) return opened.status();
    db_ = std::move(opened->db);
    marker_ = std::move(opened->marker);
    absl::StatusOr<std::unique_ptr<FenceAllocator>> fences =
        FenceAllocator::Open(db_.get());
    if (!fences.ok()) return fences.status();
    fences_ = *std::move(fences);
    // Without a WAL nothing syncs it, so nothing needs to wait for a sync.
    absl::Mutex* const wal_io_mu =
        options_.durability == Durability::kNone ? nullptr : &wal_io_mu_;
    health_->Start(db_.get(), wal_io_mu);

    ShardContext context;
    context.db = db_.get();
    context.fences = fences_.get();
    context.clock = options_.clock;
    if (options_.durability == Durability::kSync) {
      WalSyncerContext syncer_context;
      syncer_context.observer = options_.observer;
      syncer_context.health = health_.get();
      syncer_context.marker = marker_.get();
      syncer_context.wal_io_mu = &wal_io_mu_;
      syncer_ = std::make_unique<WalSyncer>(db_.get(), syncer_context);
    }
    context.syncer = syncer_.get();
    context.wal_io_mu = wal_io_mu;
    context.health = health_.get();
    context.write_options = ShardWriteOptions(options_.durability);
    context.max_batch = options_.max_batch;
    context.max_queued = options_.max_queued_per_shard;
    context.observer = options_.observer;
    context.max_tracked_inflight = options_.max_tracked_inflight_per_shard;
    context.answer_inline = options_.answer_inline;
    // Writes touch only memory in kNone (no WAL) and in kSync (the WAL is
    // buffered until the syncer flushes it), so idle shards let callers
    // write on their own threads.
    context.inline_writes = options_.durability != Durability::kAsync;
    stored_bytes_ = std::make_unique<StoredBytesAccount>(
        options_.shards, options_.max_tracked_namespaces);
    for (int i = 0; i < options_.shards; ++i) {
      shards_.push_back(
          std::make_unique<Shard>(context, &stored_bytes_->writer(i)));
    }
    // The scan's view is taken before any operation can be submitted (Open
    // has not returned): the bytes per namespace count every change from
    // exactly that view on.
    std::unique_ptr<rocksdb::Iterator> scan = NewRecordScan(db_.get());
    stored_bytes_->BeginScan();
    filter_->CountDrops(db_.get(), &stored_bytes_->dropped());
    // In the background: a restart must not wait O(records) before it
    // serves (0.44 s per million records here).
    seeder_ = std::thread([this, scan = std::move(scan)]() mutable {
      SeedInflightLeases(std::move(scan));
    });
    if (options_.durability == Durability::kAsync) {
      periodic_wal_sync_ = std::thread([this] {
        NameThisThread("dedup-wal-sync");
        SyncWalPeriodically();
      });
    }
    return absl::OkStatus();
  }

  void Begin(std::string ns, std::string key, BeginParams params,
             int64_t wait_ms, StoreCallback<BeginResult> done) override {
    if (RefusedWhileStopped(done)) return;
    BeginOp op;
    op.skey = EncodeStorageKey(ns, key);
    op.params = std::move(params);
    op.wait_deadline_ms =
        wait_ms > 0 ? options_.clock->NowMillis() + wait_ms : 0;
    op.done = std::move(done);
    Route(std::move(op));
  }

  void Complete(std::string ns, std::string key, CompleteParams params,
                StoreCallback<FencedDecision> done) override {
    if (RefusedWhileStopped(done)) return;
    Route(CompleteOp{EncodeStorageKey(ns, key), std::move(params),
                     std::move(done)});
  }

  void Release(std::string ns, std::string key, uint64_t fence,
               StoreCallback<FencedDecision> done) override {
    if (RefusedWhileStopped(done)) return;
    Route(ReleaseOp{EncodeStorageKey(ns, key), fence, std::move(done)});
  }

  void Renew(std::string ns, std::string key, uint64_t fence, int64_t lease_ms,
             StoreCallback<FencedDecision> done) override {
    if (RefusedWhileStopped(done)) return;
    Route(RenewOp{EncodeStorageKey(ns, key), fence, lease_ms, std::move(done)});
  }

  void Checkpoint(std::string ns, std::string key, CheckpointParams params,
                  StoreCallback<FencedDecision> done) override {
    if (RefusedWhileStopped(done)) return;
    Route(CheckpointOp{EncodeStorageKey(ns, key), std::move(params),
                       std::move(done)});
  }

  void BeginMany(std::vector<BeginCall> calls) override {
    std::vector<std::vector<Operation>> by_shard(shards_.size());
    for (BeginCall& call : calls) {
      if (RefusedWhileStopped(call.done)) continue;
      BeginOp op;
      op.skey = EncodeStorageKey(call.ns, call.key);
      op.params = std::move(call.params);
      op.done = std::move(call.done);
      op.result_budget = call.result_budget;
      by_shard[ShardOf(op.skey)].push_back(std::move(op));
    }
    SubmitGrouped(by_shard);
  }

  void CompleteMany(std::vector<CompleteCall> calls) override {
    std::vector<std::vector<Operation>> by_shard(shards_.size());
    for (CompleteCall& call : calls) {
      if (RefusedWhileStopped(call.done)) continue;
      CompleteOp op{EncodeStorageKey(call.ns, call.key), std::move(call.params),
                    std::move(call.done)};
      by_shard[ShardOf(op.skey)].push_back(std::move(op));
    }
    SubmitGrouped(by_shard);
  }

  void Get(std::string ns, std::string key,
           StoreCallback<std::optional<Record>> done) override {
    GetOp op{EncodeStorageKey(ns, key), std::move(done)};
    // No sync can happen now: read what the last one made durable. (Without
    // a syncer reads never wait for one.)
    op.durable_only = syncer_ != nullptr && health_->rocksdb_error();
    Route(std::move(op));
  }

  void Forget(std::string ns, std::string key,
              StoreCallback<bool> done) override {
    if (RefusedWhileStopped(done)) return;
    Route(ForgetOp{EncodeStorageKey(ns, key), std::move(done)});
  }

  absl::Status CheckServing() const override {
    return health_->CheckWritable();
  }

  absl::Status CheckServingReads() const override { return absl::OkStatus(); }

  void DrainWaiters() override {
    for (auto& shard : shards_) shard->Submit(WakeAllOp{});
  }

  absl::Status Close() override {
    if (closed_.exchange(true)) return absl::OkStatus();
    health_->Stop();                         // no Resume() from here on
    if (seeder_.joinable()) seeder_.join();  // it stops early once closed_
    filter_->CountDrops(nullptr, nullptr);   // before db_ goes
    for (auto& shard : shards_) shard->Stop();
    // After the shards: their last answers wait for it.
    if (syncer_ != nullptr) syncer_->Stop();
    if (periodic_wal_sync_.joinable()) {
      stop_periodic_sync_.Notify();
      periodic_wal_sync_.join();
    }
    if (db_ == nullptr) return absl::OkStatus();
    absl::Status status;
    // Without a WAL the memtables are the only copy of recent writes.
    if (options_.durability == Durability::kNone) {
      status = FromRocks(db_->Flush(rocksdb::FlushOptions()), "flush");
    } else if (!health_->rocksdb_error()) {
      // (After a RocksDB error the WAL must not be touched again, and
      // nothing written since was acknowledged.)
      status = FromRocks(db_->FlushWAL(/*sync=*/true), "sync WAL");
    }
    if (status.ok() && !health_->rocksdb_error()) {
      marker_->Update(CurrentMark());
      status = marker_->Sync();
    }
    absl::Status close = FromRocks(db_->Close(), "close");
    // The stopped shards stay: they answer late calls with UNAVAILABLE.
    fences_.reset();
    db_.reset();
    marker_.reset();
    return status.ok() ? close : status;
  }

  absl::Status CompactAll() override {
    if (closed_.load()) return absl::UnavailableError("store is closed");
    {
      // The flush switches memtables, which writes the WAL buffer out: not
      // while the syncer syncs (wal_syncer.h). CompactRange below then has
      // at most what was written since to flush.
      absl::ReaderMutexLock io(&wal_io_mu_);
      if (absl::Status s =
              FromRocks(db_->Flush(rocksdb::FlushOptions()), "flush");
          !s.ok()) {
        return s;
      }
    }
    rocksdb::CompactRangeOptions options;
    // Bottom-level files are otherwise skipped when nothing overlaps them,
    // and that is exactly where old expired records sit.
    options.bottommost_level_compaction =
        rocksdb::BottommostLevelCompaction::kForce;
    return FromRocks(db_->CompactRange(options, nullptr, nullptr), "compact");
  }

  StoreStats Stats() override {
    StoreStats stats;
    if (closed_.load()) return stats;
    auto property = [this](const char* name) -> uint64_t {
      uint64_t value = 0;
      return db_->GetIntProperty(name, &value) ? value : 0;
    };
    // Less the one metadata key (the fence reservation).
    const uint64_t keys = property("rocksdb.estimate-num-keys");
    stats.estimated_records = keys > 0 ? keys - 1 : 0;
    stats.live_sst_bytes = property("rocksdb.live-sst-files-size");
    stats.pending_compaction_bytes =
        property("rocksdb.estimate-pending-compaction-bytes");
    stats.block_cache_usage_bytes = property("rocksdb.block-cache-usage");
    stats.memtable_bytes = property("rocksdb.cur-size-all-mem-tables");
    stats.expired_dropped = filter_->dropped();
    stats.tombstones_dropped = filter_->tombstones_dropped();
    stats.tombstones_made = filter_->tombstones_made();
    health_->AddTo(stats);
    const int64_t now_ms = options_.clock->NowMillis();
    for (auto& shard : shards_) {
      stats.waiting_begins += shard->waiting();
      shard->AddLeaseStats(now_ms, stats);
    }
    return stats;
  }

  StoredBytes StoredBytesByNamespace() const override {
    if (closed_.load() || stored_bytes_ == nullptr) return StoredBytes();
    return stored_bytes_->Snapshot();
  }

  absl::StatusOr<uint64_t> CountStoredRecords() override {
    if (closed_.load()) return absl::UnavailableError("store is closed");
    return CountRecordsInDb(*db_);
  }

  absl::Status CreateCheckpoint(const std::string& dir) override {
    if (closed_.load()) return absl::UnavailableError("store is closed");
    rocksdb::Checkpoint* raw = nullptr;
    if (absl::Status s = FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw),
                                   "checkpoint");
        !s.ok()) {
      return s;
    }
    std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
    // log_size_for_flush 0: the memtables, which hold every answered write,
    // are flushed into the copy. The flush writes the WAL buffer out: not
    // while the syncer syncs (wal_syncer.h).
    absl::ReaderMutexLock io(&wal_io_mu_);
    return FromRocks(checkpoint->CreateCheckpoint(dir, 0), "checkpoint");
  }

 private:
  // One pass over the records after open, reading only headers, so lease
  // statistics need no scan per scrape. Runs on seeder_ while the shards
  // serve (see Shard::SeedInflight for why their writes win).
  // The same pass counts the bytes stored per namespace.
  void SeedInflightLeases(std::unique_ptr<rocksdb::Iterator> scan) {
    const int64_t now_ms = options_.clock->NowMillis();
    NamespaceBytes& scanned_bytes = stored_bytes_->scanned();
    const bool scanned = ScanRecordsForLeases(
        std::move(scan), closed_,
        [&](absl::string_view skey, absl::string_view value) {
          shards_[ShardOf(skey)]->SeedInflight(skey, value, now_ms);
          scanned_bytes.AddRecord(skey, StoredRecordBytes(skey, value));
        });
    const bool complete = scanned && !closed_.load();
    for (auto& shard : shards_) shard->FinishSeeding(complete);
    stored_bytes_->FinishScan(complete);
  }

  // Answers `done` at once when writes are stopped: true if it did.
  template <typename T>
  bool RefusedWhileStopped(StoreCallback<T>& done) {
    if (!health_->write_stopped()) return false;
    std::move(done)(health_->CheckWritable());
    return true;
  }

  // The durable state as of now, for the marker: call only when every write
  // so far is synced.
  DurableMark CurrentMark() {
    DurableMark mark{db_->GetLatestSequenceNumber()};
    std::unique_ptr<rocksdb::LogFile> wal;
    if (db_->GetCurrentWalFile(&wal).ok() && wal != nullptr) {
      mark.wal_number = wal->LogNumber();
      mark.wal_bytes = wal->SizeFileBytes();
    }
    return mark;
  }

  // From the slot the storage key carries: hashing the key again costs a
  // few percent of a batch's CPU.
  size_t ShardOf(absl::string_view skey) const {
    return SlotOfStorageKey(skey) % shards_.size();
  }

  template <typename KeyedOp>
  void Route(KeyedOp op) {
    const size_t shard = ShardOf(op.skey);
    shards_[shard]->Submit(std::move(op));
  }

  void SubmitGrouped(std::vector<std::vector<Operation>>& by_shard) {
    for (size_t i = 0; i < by_shard.size(); ++i) {
      if (!by_shard[i].empty()) shards_[i]->SubmitMany(std::move(by_shard[i]));
    }
  }

  void SyncWalPeriodically() {
    const absl::Duration interval =
        absl::Milliseconds(options_.async_sync_interval_ms);
    while (!stop_periodic_sync_.WaitForNotificationWithTimeout(interval)) {
      // Never once the WAL failed (wal_syncer.h). The mark is taken alone
      // with the WAL file, so everything it counts is in the file the fsync
      // covers; writers go on during the fsync itself.
      DurableMark mark;
      {
        absl::WriterMutexLock io(&wal_io_mu_);
        if (health_->rocksdb_error()) continue;
        mark = CurrentMark();
      }
      if (health_->rocksdb_error()) continue;
      const rocksdb::Status s = db_->SyncWAL();
      if (s.ok()) {
        marker_->Update(mark);
      } else {
        health_->OnWriteFailed(s);
      }
    }
  }

  const StoreOptions options_;
  const std::unique_ptr<TtlCompactionFilter> filter_;
  // Also a listener of db_ (shared with RocksDB's options).
  const std::shared_ptr<WriteHealth> health_;
  // See wal_syncer.h: shared by calls that may write the WAL file,
  // exclusive while it is synced.
  absl::Mutex wal_io_mu_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<DurableMarker> marker_;
  std::unique_ptr<FenceAllocator> fences_;
  std::unique_ptr<WalSyncer> syncer_;  // kSync only
  // Before shards_: they write into it until they stop.
  std::unique_ptr<StoredBytesAccount> stored_bytes_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::thread periodic_wal_sync_;
  std::thread seeder_;
  absl::Notification stop_periodic_sync_;
  std::atomic<bool> closed_{false};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> Store::Open(StoreOptions options) {
  if (options.clock == nullptr) options.clock = RealClock();
  if (options.shards < 1) {
    return absl::InvalidArgumentError("shards: must be at least 1");
  }
  auto filter = std::make_unique<TtlCompactionFilter>(
      options.clock, options.compaction_grace_ms);
  RecordDbTuning tuning;
  tuning.memory_budget_bytes = options.memory_budget_bytes;
  tuning.periodic_compaction_s = options.periodic_compaction_s;
  tuning.compaction_filter = filter.get();
  // kSync: a write only appends to RocksDB's WAL buffer, in memory; the
  // WalSyncer writes and fsyncs it for everything written meanwhile.
  tuning.manual_wal_flush = options.durability == Durability::kSync;
  rocksdb::Options db_options = RecordDbOptions(tuning);
  WriteHealthOptions health_options;
  health_options.path = options.path;
  health_options.retry_interval_ms = options.write_retry_interval_ms;
  health_options.min_free_bytes =
      options.min_free_disk_bytes < 0
          ? options.memory_budget_bytes
          : static_cast<uint64_t>(options.min_free_disk_bytes);
  auto health = std::make_shared<WriteHealth>(std::move(health_options));
  WriteHealth::Install(health, db_options);
  auto store = std::make_unique<RocksStore>(
      std::move(options), std::move(filter), std::move(health));
  if (absl::Status s = store->Init(std::move(db_options)); !s.ok()) return s;
  return store;
}

}  // namespace dedup
