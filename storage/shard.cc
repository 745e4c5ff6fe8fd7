#include "storage/shard.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <type_traits>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "rocksdb/write_batch.h"
#include "storage/shard_batch.h"

namespace dedup {
namespace {

template <typename Op>
void Fail(Op& op, const absl::Status& status) {
  if constexpr (!std::is_same_v<Op, WakeAllOp>) std::move(op.done)(status);
}

}  // namespace

Shard::Shard(const ShardContext& context, NamespaceBytes* stored_bytes)
    : context_(context),
      leases_(context.max_tracked_inflight),
      stored_bytes_(stored_bytes),
      thread_([this] { Run(); }) {
  leases_.BeginSeeding();  // before anything is submitted
}

Shard::~Shard() { Stop(); }

void Shard::Submit(Operation op) {
  if (context_.answer_inline && TryAnswerInline(op)) return;
  std::vector<Operation> ops;
  ops.push_back(std::move(op));
  SubmitMany(std::move(ops));
}

void Shard::SubmitMany(std::vector<Operation> ops) {
  std::vector<std::pair<Operation*, absl::Status>> refused;
  {
    absl::MutexLock lock(&mu_);
    for (Operation& op : ops) {
      if (stopping_) {
        refused.emplace_back(&op, absl::UnavailableError("store is closed"));
      } else if (queue_.size() >= context_.max_queued &&
                 !std::holds_alternative<WakeAllOp>(op)) {
        refused.emplace_back(
            &op, absl::ResourceExhaustedError(absl::StrCat(
                     "storage overloaded: ", queue_.size(),
                     " operations queued on this shard; retry with backoff")));
      } else {
        queue_.push_back(std::move(op));
      }
    }
  }
  // Outside the lock: a callback may submit again.
  for (auto& [op, status] : refused) {
    // (A copy: lambdas cannot capture structured bindings in C++17.)
    const absl::Status why = status;
    std::visit([&why](auto& o) { Fail(o, why); }, *op);
  }
}

void Shard::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool Shard::HasWorkLocked() const { return !queue_.empty() || stopping_; }

void Shard::Run() {
  for (;;) {
    std::vector<Operation> ops;
    bool last = false;
    {
      absl::MutexLock lock(&mu_);
      const absl::Condition has_work(this, &Shard::HasWorkLocked);
      const int64_t next_timer = next_timer_ms_.load();
      if (next_timer == INT64_MAX) {
        mu_.Await(has_work);
      } else {
        const int64_t delay = next_timer - context_.clock->NowMillis();
        if (delay > 0)
          mu_.AwaitWithTimeout(has_work, absl::Milliseconds(delay));
      }
      while (!queue_.empty() &&
             ops.size() < static_cast<size_t>(context_.max_batch)) {
        ops.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      last = stopping_ && queue_.empty();
      taken_ = !ops.empty();
    }
    const bool took = !ops.empty();
    Batch batch(context_.db, Batch::Mode::kShardThread, context_.wal_io_mu);
    absl::Status committed;
    {
      absl::MutexLock lock(&process_mu_);
      committed = ProcessBatch(batch, ops, last);
    }
    if (took) {
      absl::MutexLock lock(&mu_);
      taken_ = false;
    }
    // Outside the lock, so the shard counts as idle while answers go out.
    Release(batch, committed);
    if (last) return;
  }
}

namespace {

// What each operation answers with.
template <typename Op>
struct AnswerOf;
template <>
struct AnswerOf<BeginOp> {
  using type = BeginResult;
};
template <>
struct AnswerOf<CompleteOp> {
  using type = FencedDecision;
};
template <>
struct AnswerOf<ReleaseOp> {
  using type = FencedDecision;
};
template <>
struct AnswerOf<RenewOp> {
  using type = FencedDecision;
};
template <>
struct AnswerOf<CheckpointOp> {
  using type = FencedDecision;
};
template <>
struct AnswerOf<GetOp> {
  using type = std::optional<Record>;
};
template <>
struct AnswerOf<ForgetOp> {
  using type = bool;
};

// A copy of `op` that answers into `answer` instead of op.done, so that the
// original can still be queued if the inline attempt is refused.
template <typename Op, typename T = typename AnswerOf<Op>::type>
Op ProbeOf(const Op& op, std::optional<absl::StatusOr<T>>* answer) {
  Op probe;
  if constexpr (std::is_same_v<Op, BeginOp>) {
    probe.params = op.params;
    probe.wait_deadline_ms = op.wait_deadline_ms;
  } else if constexpr (std::is_same_v<Op, CompleteOp>) {
    probe.params = op.params;
  } else if constexpr (std::is_same_v<Op, ReleaseOp>) {
    probe.fence = op.fence;
  } else if constexpr (std::is_same_v<Op, RenewOp>) {
    probe.fence = op.fence;
    probe.lease_ms = op.lease_ms;
  } else if constexpr (std::is_same_v<Op, CheckpointOp>) {
    probe.params = op.params;
  }
  probe.skey = op.skey;
  probe.done = [answer](absl::StatusOr<T> r) { *answer = std::move(r); };
  return probe;
}

}  // namespace

// Defined before its use below: clang instantiates a member template only
// where its definition is visible.
template <typename Op>
WalSyncer::Release Shard::AnswerInline(Op& op) {
  using T = typename AnswerOf<Op>::type;
  if constexpr (std::is_same_v<Op, BeginOp>) {
    if (op.wait_deadline_ms != 0) return nullptr;  // it may have to park
  }
  std::optional<absl::StatusOr<T>> answer;
  Operation probe(ProbeOf(op, &answer));
  Batch batch(context_.db,
              context_.inline_writes ? Batch::Mode::kInlineMemoryWrite
                                     : Batch::Mode::kInlineReadOnly,
              context_.wal_io_mu);
  const int64_t now_ms = context_.clock->NowMillis();
  Process(batch, probe, now_ms);
  if (batch.refused()) return nullptr;
  const absl::Status committed = Commit(batch, now_ms);
  if (batch.refused()) return nullptr;
  batch.RunCompletions(committed);
  if (!answer.has_value()) return nullptr;  // cannot happen: Process answers
  return [done = std::move(op.done),
          answer = *std::move(answer)](const absl::Status& synced) mutable {
    DeliverUnlessFailed(std::move(done), std::move(answer), synced);
  };
}

bool Shard::TryAnswerInline(Operation& operation) {
  if (std::holds_alternative<WakeAllOp>(operation)) return false;
  if (const auto* get = std::get_if<GetOp>(&operation);
      get != nullptr && get->durable_only) {
    return false;  // rare (writes stopped): the shard thread reads
  }
  if (!process_mu_.TryLock()) return false;  // the shard thread is working
  WalSyncer::Release deliver;
  bool idle;
  {
    absl::MutexLock lock(&mu_);
    idle = queue_.empty() && !taken_ && !stopping_;
  }
  // Parked Begins need the shard thread's timers, so any waiter means busy.
  if (idle && waiters_.empty()) {
    // The analysis cannot see into the lambda that process_mu_ is held.
    deliver = std::visit(
        [this](auto& op) ABSL_NO_THREAD_SAFETY_ANALYSIS -> WalSyncer::Release {
          using Op = std::decay_t<decltype(op)>;
          if constexpr (std::is_same_v<Op, WakeAllOp>) {
            return nullptr;
          } else {
            return AnswerInline(op);
          }
        },
        operation);
  }
  process_mu_.Unlock();
  if (!deliver) return false;
  // Outside the lock: answering may send a response or submit again.
  WhenDurable(std::move(deliver));
  return true;
}

void Shard::Release(Batch& batch, const absl::Status& committed) {
  if (!committed.ok()) {
    batch.RunCompletions(committed);
    return;
  }
  WhenDurable([completions = batch.TakeCompletions()](
                  const absl::Status& synced) mutable {
    Batch::RunAll(completions, synced);
  });
}

void Shard::WhenDurable(WalSyncer::Release release) {
  if (context_.syncer == nullptr) {
    std::move(release)(absl::OkStatus());
  } else {
    // Even a read's answer: what it saw may be a write whose fsync is still
    // pending.
    context_.syncer->AfterSync(std::move(release));
  }
}

absl::Status Shard::Commit(Batch& batch, int64_t now_ms) {
  // Writes decided before the store stopped are refused here, not written:
  // the disk may have no room for them.
  if (context_.health != nullptr && batch.write_count() > 0 &&
      context_.health->StoppedBeforeWrite()) {
    return context_.health->CheckWritable();
  }
  const auto start = std::chrono::steady_clock::now();
  absl::Status committed = batch.Commit(context_.write_options);
  if (batch.refused()) return committed;
  if (!committed.ok() && context_.health != nullptr) {
    // RocksDB refused it (an error of its own, a stalled write given up):
    // no writes until it resumes, and the callers are told why.
    context_.health->OnWriteFailed(batch.write_status());
    committed = context_.health->CheckWritable();
  }
  // With a syncer, the fsync is the write that counts: it reports it.
  if (context_.observer != nullptr && context_.syncer == nullptr &&
      batch.write_count() > 0) {
    context_.observer->OnWrite(
        batch.write_count(),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  if (committed.ok()) UpdateInflight(batch, now_ms);
  return committed;
}

absl::Status Shard::ProcessBatch(Batch& batch, std::vector<Operation>& ops,
                                 bool last) {
  const int64_t now_ms = context_.clock->NowMillis();
  WakeDue(batch, now_ms);
  for (Operation& op : ops) Process(batch, op, now_ms);
  if (last) {
    draining_ = true;
    WakeAll(batch, now_ms);
  }
  const absl::Status committed = Commit(batch, now_ms);
  next_timer_ms_.store(timers_.empty() ? INT64_MAX : timers_.begin()->first);
  return committed;
}

void Shard::SeedInflight(absl::string_view skey, absl::string_view value,
                         int64_t now_ms) {
  leases_.Seed(skey, value, now_ms);
}

void Shard::FinishSeeding(bool complete) { leases_.FinishSeeding(complete); }

void Shard::AddLeaseStats(int64_t now_ms, StoreStats& stats) const {
  leases_.AddStats(now_ms, stats);
}

void Shard::UpdateInflight(Batch& batch, int64_t now_ms) {
  std::vector<LeaseTracker::Write> writes;
  batch.ForEachFinalWrite(
      [&writes](absl::string_view skey, const std::string* value) {
        writes.emplace_back(skey, value);
      });
  leases_.OnWrites(writes, now_ms);
  if (stored_bytes_ != nullptr) {
    batch.ForEachStoredBytesChange(
        [this](absl::string_view skey, int64_t delta) {
          stored_bytes_->AddRecord(skey, delta);
        });
  }
}

void Shard::Process(Batch& batch, Operation& operation, int64_t now_ms) {
  if (auto* op = std::get_if<BeginOp>(&operation)) {
    ProcessBegin(batch, std::move(*op), now_ms);
    return;
  }
  if (std::holds_alternative<WakeAllOp>(operation)) {
    draining_ = true;
    WakeAll(batch, now_ms);
    return;
  }
  if (auto* get = std::get_if<GetOp>(&operation);
      get != nullptr && get->durable_only) {
    ProcessDurableGet(*get, now_ms);
    return;
  }
  // The remaining operations all read one key, decide, and maybe write.
  // (Under process_mu_, which the analysis cannot see into the lambda.)
  std::visit(
      [&](auto& op) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        using Op = std::decay_t<decltype(op)>;
        if constexpr (!std::is_same_v<Op, BeginOp> &&
                      !std::is_same_v<Op, WakeAllOp>) {
          absl::StatusOr<std::optional<Record>> stored = batch.Read(op.skey);
          if (!stored.ok()) {
            Fail(op, stored.status());
            return;
          }
          if constexpr (std::is_same_v<Op, GetOp>) {
            batch.Answer(std::move(op.done), LiveRecord(*stored, now_ms));
            return;
          } else if constexpr (std::is_same_v<Op, ForgetOp>) {
            const bool existed = LiveRecord(*stored, now_ms).has_value();
            // Delete even an expired leftover so Forget always frees space.
            const WriteKind write =
                stored->has_value() ? WriteKind::kDelete : WriteKind::kNone;
            batch.Answer(std::move(op.done), existed);
            if (const std::string* skey =
                    batch.Apply(std::move(op.skey), write, Record())) {
              WakeKey(batch, *skey, now_ms);
            }
          } else {
            FencedDecision d;
            if constexpr (std::is_same_v<Op, CompleteOp>) {
              d = DecideComplete(*stored, op.params, now_ms);
            } else if constexpr (std::is_same_v<Op, ReleaseOp>) {
              d = DecideRelease(*stored, op.fence, now_ms);
            } else if constexpr (std::is_same_v<Op, CheckpointOp>) {
              d = DecideCheckpoint(*stored, op.params, now_ms);
            } else {
              d = DecideRenew(*stored, op.fence, op.lease_ms, now_ms);
            }
            const std::string* skey =
                batch.Apply(std::move(op.skey), d.write, d.record);
            batch.Answer(std::move(op.done), std::move(d));
            // An outcome or a release is what parked Begins wait for; a
            // renewed lease or a checkpoint only moves their next check.
            if (skey != nullptr && !std::is_same_v<Op, RenewOp> &&
                !std::is_same_v<Op, CheckpointOp>) {
              WakeKey(batch, *skey, now_ms);
            }
          }
        }
      },
      operation);
}

void Shard::ProcessBegin(Batch& batch, BeginOp op, int64_t now_ms) {
  absl::StatusOr<Batch::Found> found = batch.ReadLeavingResult(op.skey);
  if (!found.ok()) {
    Fail(op, found.status());
    return;
  }
  absl::Status fence_status;
  auto next_fence = [&]() -> uint64_t {
    if (batch.is_inline()) {
      // A read-only batch will be refused anyway: spend no fence. Never
      // reserve a fence block (a synced write) on a caller's thread.
      std::optional<uint64_t> fence;
      if (batch.may_write()) fence = context_.fences->NextWithoutIo();
      if (!fence.has_value()) batch.Refuse();
      return fence.value_or(0);
    }
    absl::StatusOr<uint64_t> fence = NextFence();
    if (!fence.ok()) {
      fence_status = fence.status();
      return 0;
    }
    return *fence;
  };
  BeginDecision d = DecideBegin(found->record, op.params, now_ms, next_fence);
  if (!fence_status.ok()) {
    Fail(op, fence_status);
    return;
  }
  if (d.status == BeginStatus::kInUse && !draining_ &&
      now_ms < op.wait_deadline_ms) {
    const int64_t next_check =
        std::min(op.wait_deadline_ms, d.record.lease_until_ms);
    Park(std::move(op), next_check);
    return;
  }
  if (d.status == BeginStatus::kDuplicate) {
    if (op.result_budget != nullptr &&
        !op.result_budget->Take(found->result_size)) {
      // Answered now, holding nothing: a DUPLICATE writes nothing, so there
      // is no write for this answer to wait for.
      std::move(op.done)(ResultBudgetExceeded(*op.result_budget));
      return;
    }
    d.record.result = found->Result();
  }
  batch.Apply(std::move(op.skey), d.write, d.record);
  batch.Answer(std::move(op.done), BeginResult{std::move(d), op.waited});
}

absl::StatusOr<uint64_t> Shard::NextFence() {
  if (std::optional<uint64_t> fence = context_.fences->NextWithoutIo()) {
    return *fence;
  }
  // Reserving a block is a synced write: it writes and syncs the WAL file.
  std::optional<absl::ReaderMutexLock> io;
  if (context_.wal_io_mu != nullptr) io.emplace(context_.wal_io_mu);
  absl::StatusOr<uint64_t> fence = context_.fences->Next();
  if (!fence.ok() && context_.health != nullptr &&
      context_.health->write_stopped()) {
    return context_.health->CheckWritable();
  }
  return fence;
}

void Shard::ProcessDurableGet(GetOp& op, int64_t now_ms) {
  std::shared_ptr<const rocksdb::Snapshot> snapshot =
      context_.syncer != nullptr ? context_.syncer->DurableSnapshot() : nullptr;
  if (snapshot == nullptr) {
    Fail(op, context_.health != nullptr
                 ? context_.health->CheckWritable()
                 : absl::UnavailableError("no durable state to read yet"));
    return;
  }
  rocksdb::ReadOptions options;
  options.snapshot = snapshot.get();
  std::string value;
  const rocksdb::Status s = context_.db->Get(options, op.skey, &value);
  if (s.IsNotFound()) {
    std::move(op.done)(std::optional<Record>());
    return;
  }
  if (!s.ok()) {
    Fail(op,
         absl::UnavailableError(absl::StrCat("storage read: ", s.ToString())));
    return;
  }
  absl::StatusOr<Record> record = DecodeRecord(value);
  if (!record.ok()) {
    Fail(op, record.status());
    return;
  }
  // Everything the snapshot shows is durable: answered without a sync.
  std::move(op.done)(
      LiveRecord(std::optional<Record>(*std::move(record)), now_ms));
}

void Shard::Park(BeginOp op, int64_t next_check_ms) {
  const uint64_t id = next_waiter_id_++;
  op.waited = true;
  waiters_by_key_[op.skey].push_back(id);
  timers_.emplace(next_check_ms, id);
  waiters_.emplace(id, Waiter{std::move(op), next_check_ms});
  waiting_.fetch_add(1);
}

BeginOp Shard::Unpark(uint64_t id) {
  auto it = waiters_.find(id);
  Waiter waiter = std::move(it->second);
  waiters_.erase(it);
  timers_.erase({waiter.next_check_ms, id});
  auto by_key = waiters_by_key_.find(waiter.op.skey);
  std::vector<uint64_t>& ids = by_key->second;
  ids.erase(std::find(ids.begin(), ids.end(), id));
  if (ids.empty()) waiters_by_key_.erase(by_key);
  waiting_.fetch_sub(1);
  return std::move(waiter.op);
}

void Shard::WakeKey(Batch& batch, const std::string& skey, int64_t now_ms) {
  auto it = waiters_by_key_.find(skey);
  if (it == waiters_by_key_.end()) return;
  // In arrival order, so after a Release the longest waiter gets STARTED and
  // the others park again behind it.
  const std::vector<uint64_t> ids = it->second;
  for (uint64_t id : ids) ProcessBegin(batch, Unpark(id), now_ms);
}

void Shard::WakeDue(Batch& batch, int64_t now_ms) {
  while (!timers_.empty() && timers_.begin()->first <= now_ms) {
    ProcessBegin(batch, Unpark(timers_.begin()->second), now_ms);
  }
}

void Shard::WakeAll(Batch& batch, int64_t now_ms) {
  while (!waiters_.empty()) {
    BeginOp op = Unpark(waiters_.begin()->first);
    op.wait_deadline_ms = 0;
    ProcessBegin(batch, std::move(op), now_ms);
  }
}

}  // namespace dedup
