#include "storage/store.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "storage/db_options.h"
#include "storage/fence_allocator.h"
#include "storage/lease_tracker.h"
#include "storage/shard.h"
#include "storage/storage_key.h"
#include "storage/ttl_compaction_filter.h"
#include "storage/wal_syncer.h"

namespace dedup {
namespace {

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", s.ToString()));
}

// How shards write. Never synced: in kSync the WalSyncer fsyncs for them.
rocksdb::WriteOptions ShardWriteOptions(Durability durability) {
  rocksdb::WriteOptions options;
  options.disableWAL = durability == Durability::kNone;
  return options;
}

class RocksStore : public Store {
 public:
  RocksStore(StoreOptions options, std::unique_ptr<TtlCompactionFilter> filter)
      : options_(std::move(options)), filter_(std::move(filter)) {}

  ~RocksStore() override { (void)Close(); }

  absl::Status Init(rocksdb::Options db_options) {
    absl::StatusOr<std::unique_ptr<rocksdb::DB>> db =
        OpenRecordDb(db_options, options_.path);
    if (!db.ok()) return db.status();
    db_ = *std::move(db);
    absl::StatusOr<std::unique_ptr<FenceAllocator>> fences =
        FenceAllocator::Open(db_.get());
    if (!fences.ok()) return fences.status();
    fences_ = *std::move(fences);

    ShardContext context;
    context.db = db_.get();
    context.fences = fences_.get();
    context.clock = options_.clock;
    if (options_.durability == Durability::kSync) {
      syncer_ = std::make_unique<WalSyncer>(db_.get(), options_.observer);
    }
    context.syncer = syncer_.get();
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
    for (int i = 0; i < options_.shards; ++i) {
      shards_.push_back(std::make_unique<Shard>(context));
    }
    // In the background: a restart must not wait O(records) before it
    // serves (0.44 s per million records here).
    seeder_ = std::thread([this] { SeedInflightLeases(); });
    if (options_.durability == Durability::kAsync) {
      periodic_wal_sync_ = std::thread([this] { SyncWalPeriodically(); });
    }
    return absl::OkStatus();
  }

  void Begin(std::string ns, std::string key, BeginParams params,
             int64_t wait_ms, StoreCallback<BeginResult> done) override {
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
    Route(CompleteOp{EncodeStorageKey(ns, key), std::move(params),
                     std::move(done)});
  }

  void Release(std::string ns, std::string key, uint64_t fence,
               StoreCallback<FencedDecision> done) override {
    Route(ReleaseOp{EncodeStorageKey(ns, key), fence, std::move(done)});
  }

  void Renew(std::string ns, std::string key, uint64_t fence, int64_t lease_ms,
             StoreCallback<FencedDecision> done) override {
    Route(RenewOp{EncodeStorageKey(ns, key), fence, lease_ms, std::move(done)});
  }

  void BeginMany(std::vector<BeginCall> calls) override {
    std::vector<std::vector<Operation>> by_shard(shards_.size());
    for (BeginCall& call : calls) {
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
      CompleteOp op{EncodeStorageKey(call.ns, call.key), std::move(call.params),
                    std::move(call.done)};
      by_shard[ShardOf(op.skey)].push_back(std::move(op));
    }
    SubmitGrouped(by_shard);
  }

  void Get(std::string ns, std::string key,
           StoreCallback<std::optional<Record>> done) override {
    Route(GetOp{EncodeStorageKey(ns, key), std::move(done)});
  }

  void Forget(std::string ns, std::string key,
              StoreCallback<bool> done) override {
    Route(ForgetOp{EncodeStorageKey(ns, key), std::move(done)});
  }

  void DrainWaiters() override {
    for (auto& shard : shards_) shard->Submit(WakeAllOp{});
  }

  absl::Status Close() override {
    if (closed_.exchange(true)) return absl::OkStatus();
    if (seeder_.joinable()) seeder_.join();  // it stops early once closed_
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
    } else {
      status = FromRocks(db_->FlushWAL(/*sync=*/true), "sync WAL");
    }
    absl::Status close = FromRocks(db_->Close(), "close");
    // The stopped shards stay: they answer late calls with UNAVAILABLE.
    fences_.reset();
    db_.reset();
    return status.ok() ? close : status;
  }

  absl::Status CompactAll() override {
    if (closed_.load()) return absl::UnavailableError("store is closed");
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
    const int64_t now_ms = options_.clock->NowMillis();
    for (auto& shard : shards_) {
      stats.waiting_begins += shard->waiting();
      shard->AddLeaseStats(now_ms, stats);
    }
    return stats;
  }

  absl::StatusOr<uint64_t> CountStoredRecords() override {
    if (closed_.load()) return absl::UnavailableError("store is closed");
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(TotalOrderScan()));
    uint64_t count = 0;
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (!IsRecordKey(absl::string_view(it->key().data(), it->key().size()))) {
        break;  // metadata sorts after every record
      }
      ++count;
    }
    if (absl::Status s = FromRocks(it->status(), "scan"); !s.ok()) return s;
    return count;
  }

 private:
  // One pass over the records after open, reading only headers, so lease
  // statistics need no scan per scrape. Runs on seeder_ while the shards
  // serve (see Shard::SeedInflight for why their writes win).
  void SeedInflightLeases() {
    const int64_t now_ms = options_.clock->NowMillis();
    const bool scanned = ScanRecordsForLeases(
        db_.get(), closed_,
        [this, now_ms](absl::string_view skey, absl::string_view value) {
          shards_[ShardOf(skey)]->SeedInflight(skey, value, now_ms);
        });
    const bool complete = scanned && !closed_.load();
    for (auto& shard : shards_) shard->FinishSeeding(complete);
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
      (void)db_->SyncWAL();
    }
  }

  const StoreOptions options_;
  const std::unique_ptr<TtlCompactionFilter> filter_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<FenceAllocator> fences_;
  std::unique_ptr<WalSyncer> syncer_;  // kSync only
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
  auto store =
      std::make_unique<RocksStore>(std::move(options), std::move(filter));
  if (absl::Status s = store->Init(std::move(db_options)); !s.ok()) return s;
  return store;
}

}  // namespace dedup
