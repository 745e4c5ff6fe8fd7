#include "replication/group_router.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "storage/storage_key.h"

namespace dedup {
namespace {

absl::Status Closed() {
  return absl::UnavailableError("the store is closed (the node is stopping)");
}

// Sums what adds up, keeps the worst of what does not.
void AddStats(const StoreStats& s, StoreStats& sum) {
  sum.estimated_records += s.estimated_records;
  sum.expired_dropped += s.expired_dropped;
  sum.tombstones_dropped += s.tombstones_dropped;
  sum.tombstones_made += s.tombstones_made;
  sum.waiting_begins += s.waiting_begins;
  sum.inflight_leases += s.inflight_leases;
  sum.lapsed_leases += s.lapsed_leases;
  sum.oldest_lapsed_lease_ms =
      std::max(sum.oldest_lapsed_lease_ms, s.oldest_lapsed_lease_ms);
  sum.inflight_tracking_saturated |= s.inflight_tracking_saturated;
  sum.live_sst_bytes += s.live_sst_bytes;
  sum.pending_compaction_bytes += s.pending_compaction_bytes;
  sum.block_cache_usage_bytes += s.block_cache_usage_bytes;
  sum.memtable_bytes += s.memtable_bytes;
  sum.background_errors += s.background_errors;
  sum.write_resumes += s.write_resumes;
  if (s.write_stopped && !sum.write_stopped) sum.write_error = s.write_error;
  sum.write_stopped |= s.write_stopped;
  // Every group's data sits on the node's one data dir file system.
  if (s.data_dir_free_bytes != 0 &&
      (sum.data_dir_free_bytes == 0 ||
       s.data_dir_free_bytes < sum.data_dir_free_bytes)) {
    sum.data_dir_free_bytes = s.data_dir_free_bytes;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<GroupRouter>> GroupRouter::Create(
    Options options) {
  if (absl::Status s = ValidateLayout(options.layout); !s.ok()) return s;
  for (const auto& [id, store] : options.hosted) {
    if (options.layout.Find(id) == nullptr || store == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("hosted group ", id, " is not in the layout"));
    }
  }
  if (!options.not_hosted) {
    return absl::InvalidArgumentError("not_hosted: required");
  }
  return std::unique_ptr<GroupRouter>(new GroupRouter(std::move(options)));
}

GroupRouter::GroupRouter(Options options)
    : layout_(std::move(options.layout)),
      not_hosted_(std::move(options.not_hosted)),
      hosted_(std::make_shared<const HostedMap>(std::move(options.hosted))) {}

GroupRouter::HostedPtr GroupRouter::Hosted() const {
  absl::MutexLock lock(&mu_);
  return hosted_;
}

absl::Status GroupRouter::AddHosted(uint32_t group_id, Store* store) {
  if (layout_.Find(group_id) == nullptr || store == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", group_id, " is not in the layout"));
  }
  absl::MutexLock lock(&mu_);
  if (hosted_->count(group_id) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("group ", group_id, " is already hosted"));
  }
  auto next = std::make_shared<HostedMap>(*hosted_);
  (*next)[group_id] = store;
  hosted_ = std::move(next);
  return absl::OkStatus();
}

absl::Status GroupRouter::RemoveHosted(uint32_t group_id,
                                       absl::Duration quiesce) {
  std::weak_ptr<const HostedMap> old;
  {
    absl::MutexLock lock(&mu_);
    if (hosted_->count(group_id) == 0) {
      return absl::NotFoundError(
          absl::StrCat("group ", group_id, " is not hosted"));
    }
    auto next = std::make_shared<HostedMap>(*hosted_);
    next->erase(group_id);
    old = hosted_;
    hosted_ = std::move(next);
  }
  // Operations hold a map only while handing work over: microseconds.
  const absl::Time deadline = absl::Now() + quiesce;
  while (!old.expired()) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "group ", group_id, ": an operation still routes with the old map"));
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  return absl::OkStatus();
}

std::vector<uint32_t> GroupRouter::HostedGroups() const {
  std::vector<uint32_t> ids;
  for (const auto& [id, store] : *Hosted()) ids.push_back(id);
  return ids;
}

uint32_t GroupRouter::GroupOf(absl::string_view ns,
                              absl::string_view key) const {
  return layout_.GroupOfSlot(SlotOf(ns, key)).id;
}

Store* GroupRouter::Route(const HostedMap& hosted, uint32_t group,
                          absl::Status& refusal) const {
  if (closed_.load(std::memory_order_acquire)) {
    refusal = Closed();
    return nullptr;
  }
  auto it = hosted.find(group);
  if (it == hosted.end()) {
    refusal = not_hosted_(group);
    return nullptr;
  }
  return it->second;
}

template <typename Done, typename Submit>
void GroupRouter::RouteOne(uint32_t group, Done& done, Submit submit) {
  absl::Status refusal;
  Store* store = nullptr;
  {
    const HostedPtr hosted = Hosted();
    store = Route(*hosted, group, refusal);
    if (store != nullptr) {
      submit(*store);
      return;
    }
  }
  std::move(done)(refusal);
}

void GroupRouter::Begin(std::string ns, std::string key, BeginParams params,
                        int64_t wait_ms, StoreCallback<BeginResult> done) {
  RouteOne(GroupOf(ns, key), done, [&](Store& store) {
    store.Begin(std::move(ns), std::move(key), std::move(params), wait_ms,
                std::move(done));
  });
}

void GroupRouter::Complete(std::string ns, std::string key,
                           CompleteParams params,
                           StoreCallback<FencedDecision> done) {
  RouteOne(GroupOf(ns, key), done, [&](Store& store) {
    store.Complete(std::move(ns), std::move(key), std::move(params),
                   std::move(done));
  });
}

void GroupRouter::Release(std::string ns, std::string key, uint64_t fence,
                          StoreCallback<FencedDecision> done) {
  RouteOne(GroupOf(ns, key), done, [&](Store& store) {
    store.Release(std::move(ns), std::move(key), fence, std::move(done));
  });
}

void GroupRouter::Renew(std::string ns, std::string key, uint64_t fence,
                        int64_t lease_ms, StoreCallback<FencedDecision> done) {
  RouteOne(GroupOf(ns, key), done, [&](Store& store) {
    store.Renew(std::move(ns), std::move(key), fence, lease_ms,
                std::move(done));
  });
}

void GroupRouter::Checkpoint(std::string ns, std::string key,
                             CheckpointParams params,
                             StoreCallback<FencedDecision> done) {
  RouteOne(GroupOf(ns, key), done, [&](Store& store) {
    store.Checkpoint(std::move(ns), std::move(key), std::move(params),
                     std::move(done));
  });
}

template <typename Call, typename Submit>
void GroupRouter::SplitByGroup(std::vector<Call> calls, Submit submit) {
  const HostedPtr hosted = Hosted();
  std::map<Store*, std::vector<Call>> by_store;
  std::vector<std::pair<Call, absl::Status>> refused;
  for (Call& call : calls) {
    absl::Status refusal;
    if (Store* store = Route(*hosted, GroupOf(call.ns, call.key), refusal)) {
      by_store[store].push_back(std::move(call));
    } else {
      refused.emplace_back(std::move(call), std::move(refusal));
    }
  }
  for (auto& [call, refusal] : refused) std::move(call.done)(refusal);
  for (auto& [store, share] : by_store) submit(*store, std::move(share));
}

void GroupRouter::BeginMany(std::vector<BeginCall> calls) {
  SplitByGroup(std::move(calls), [](Store& store, std::vector<BeginCall> c) {
    store.BeginMany(std::move(c));
  });
}

void GroupRouter::CompleteMany(std::vector<CompleteCall> calls) {
  SplitByGroup(std::move(calls), [](Store& store, std::vector<CompleteCall> c) {
    store.CompleteMany(std::move(c));
  });
}

void GroupRouter::Get(std::string ns, std::string key,
                      StoreCallback<std::optional<Record>> done) {
  RouteOne(GroupOf(ns, key), done, [&](Store& store) {
    store.Get(std::move(ns), std::move(key), std::move(done));
  });
}

void GroupRouter::Forget(std::string ns, std::string key,
                         StoreCallback<bool> done) {
  RouteOne(GroupOf(ns, key), done, [&](Store& store) {
    store.Forget(std::move(ns), std::move(key), std::move(done));
  });
}

absl::Status GroupRouter::CheckServing() const {
  return closed_.load(std::memory_order_acquire) ? Closed() : absl::OkStatus();
}

void GroupRouter::DrainWaiters() {
  for (const auto& [id, store] : *Hosted()) store->DrainWaiters();
}

absl::Status GroupRouter::Close() {
  closed_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status GroupRouter::CompactAll() {
  for (const auto& [id, store] : *Hosted()) {
    if (absl::Status s = store->CompactAll(); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("group ", id, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

StoreStats GroupRouter::Stats() {
  StoreStats sum;
  for (const auto& [id, store] : *Hosted()) AddStats(store->Stats(), sum);
  return sum;
}

StoredBytes GroupRouter::StoredBytesByNamespace() const {
  StoredBytes sum;
  sum.complete = true;
  for (const auto& [id, store] : *Hosted()) {
    StoredBytes part = store->StoredBytesByNamespace();
    sum.complete &= part.complete;
    sum.truncated |= part.truncated;
    for (const auto& [ns, bytes] : part.by_namespace) {
      sum.by_namespace[ns] += bytes;
    }
  }
  return sum;
}

absl::StatusOr<uint64_t> GroupRouter::CountStoredRecords() {
  uint64_t total = 0;
  for (const auto& [id, store] : *Hosted()) {
    absl::StatusOr<uint64_t> n = store->CountStoredRecords();
    if (!n.ok()) return n.status();
    total += *n;
  }
  return total;
}

}  // namespace dedup
