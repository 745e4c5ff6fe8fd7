// The Store of a node hosting replicas of several Raft groups (sharding):
// routes every operation by its key's slot (storage_key.h SlotOf) to the
// group owning it in the layout.
//
// - A group this node hosts: the operation goes to that group's Store (a
//   ReplicatedStore), which answers as it would alone (the leader decides,
//   a follower refuses UNAVAILABLE with kLeaderAddressPayload).
// - A group this node does not host: answered at once with
//   Options::not_hosted(group), an UNAVAILABLE that carries
//   kLeaderAddressPayload (the group's last known leader, or a replica)
//   when one is known, so the server forwards it or the client goes there.
// - BeginMany / CompleteMany are split by group: each hosted group gets its
//   items in one call (one log entry where they fit), each item is answered
//   through its own callback; there is no atomicity across groups.
//
// CheckServing / CheckServingReads cannot name a key: they answer OK while
// the router is open (UNAVAILABLE once closed), and each operation learns
// its group's state from its callback. Close closes nothing it does not own:
// the hosted stores belong to the caller. Stats and the stored bytes are
// summed over the hosted stores; CountStoredRecords too.
//
// Hosting changes at run time (a replica moved in or out, `dedupctl
// cluster move`): AddHosted and RemoveHosted swap the hosted map while
// operations run. Each operation routes with the map it read when it
// started (a shared_ptr snapshot) and holds it only until its store has
// taken the operation, so RemoveHosted can wait until no operation can
// still reach the removed store before its owner closes it.
//
// Thread safety: every method may be called from any thread, as the hosted
// stores allow; the hosted map is guarded by a mutex held only to read or
// swap the pointer. Callbacks run where the hosted store runs them, or (for
// a group not hosted here, or a closed router) on the calling thread.
#ifndef DEDUP_REPLICATION_GROUP_ROUTER_H_
#define DEDUP_REPLICATION_GROUP_ROUTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "replication/shard_layout.h"
#include "storage/store.h"

namespace dedup {

class GroupRouter final : public Store {
 public:
  struct Options {
    // Must pass ValidateLayout.
    ShardLayout layout;
    // The stores of the groups this node hosts at first, by group id. Not
    // owned: each must outlive the router, or its RemoveHosted.
    std::map<uint32_t, Store*> hosted;
    // The refusal of an operation on a group not hosted here: UNAVAILABLE,
    // with kLeaderAddressPayload when an address of the group is known.
    // Called on any thread; must be thread-safe and quick.
    std::function<absl::Status(uint32_t group_id)> not_hosted;
  };

  // INVALID_ARGUMENT: an invalid layout, a hosted id not in it, or no
  // not_hosted.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<GroupRouter>> Create(
      Options options);

  // Starts routing `group_id`'s operations to `store` (not owned; it must
  // outlive the router or its RemoveHosted). INVALID_ARGUMENT: not in the
  // layout, or null; ALREADY_EXISTS: already hosted.
  [[nodiscard]] absl::Status AddHosted(uint32_t group_id, Store* store);
  // Stops routing to `group_id` (later operations get not_hosted), then
  // waits up to `quiesce` until every operation that read the old map has
  // handed its work to its store: after an OK the removed store is reached
  // by nothing new and may be closed. NOT_FOUND: not hosted;
  // DEADLINE_EXCEEDED: removed, but an operation still held the old map.
  [[nodiscard]] absl::Status RemoveHosted(uint32_t group_id,
                                          absl::Duration quiesce);
  // The groups hosted now.
  [[nodiscard]] std::vector<uint32_t> HostedGroups() const;

  // The group id owning (ns, key).
  [[nodiscard]] uint32_t GroupOf(absl::string_view ns,
                                 absl::string_view key) const;

  void Begin(std::string ns, std::string key, BeginParams params,
             int64_t wait_ms, StoreCallback<BeginResult> done) override;
  void Complete(std::string ns, std::string key, CompleteParams params,
                StoreCallback<FencedDecision> done) override;
  void Release(std::string ns, std::string key, uint64_t fence,
               StoreCallback<FencedDecision> done) override;
  void Renew(std::string ns, std::string key, uint64_t fence, int64_t lease_ms,
             StoreCallback<FencedDecision> done) override;
  void Checkpoint(std::string ns, std::string key, CheckpointParams params,
                  StoreCallback<FencedDecision> done) override;
  void BeginMany(std::vector<BeginCall> calls) override;
  void CompleteMany(std::vector<CompleteCall> calls) override;
  void Get(std::string ns, std::string key,
           StoreCallback<std::optional<Record>> done) override;
  void Forget(std::string ns, std::string key,
              StoreCallback<bool> done) override;
  [[nodiscard]] absl::Status CheckServing() const override;
  void DrainWaiters() override;
  // Marks the router closed (later operations: UNAVAILABLE); the hosted
  // stores stay open (the caller closes them).
  absl::Status Close() override;
  [[nodiscard]] absl::Status CompactAll() override;
  [[nodiscard]] StoreStats Stats() override;
  [[nodiscard]] StoredBytes StoredBytesByNamespace() const override;
  [[nodiscard]] absl::StatusOr<uint64_t> CountStoredRecords() override;

 private:
  using HostedMap = std::map<uint32_t, Store*>;
  using HostedPtr = std::shared_ptr<const HostedMap>;

  explicit GroupRouter(Options options);
  // The hosted map now; hold it only while handing work to its stores.
  HostedPtr Hosted() const ABSL_LOCKS_EXCLUDED(mu_);
  // The store of `group` in `hosted`, or null (then `refusal` says why).
  Store* Route(const HostedMap& hosted, uint32_t group,
               absl::Status& refusal) const;
  // Routes one operation on `group`: `submit(store)` while holding the
  // map, or `done(refusal)` after letting it go.
  template <typename Done, typename Submit>
  void RouteOne(uint32_t group, Done& done, Submit submit);
  // Hands each hosted store its share of `calls` in one submit(store,
  // share), in arrival order; answers the others' callbacks with their
  // refusal first.
  template <typename Call, typename Submit>
  void SplitByGroup(std::vector<Call> calls, Submit submit);

  const ShardLayout layout_;
  const std::function<absl::Status(uint32_t)> not_hosted_;
  mutable absl::Mutex mu_;
  HostedPtr hosted_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> closed_{false};
};

}  // namespace dedup

#endif  // DEDUP_REPLICATION_GROUP_ROUTER_H_
