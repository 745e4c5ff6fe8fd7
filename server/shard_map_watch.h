// Keeps this node's copy of the shard map current (GroupDirectory::Adopt):
// a node hosting group 0 (the meta group) reads its own replica's stored
// map whenever an applied entry replaced it and on every tick; a node not
// hosting it asks a group-0 replica (Cluster.ShardMap at its client
// address) on every tick. The leader of group 0 also stores the founding
// layout when no map is stored yet (once; a stored map wins), and the
// leader of any group repairs the map where it disagrees with the group's
// voters (shard_map_repair.h).
#ifndef DEDUP_SERVER_SHARD_MAP_WATCH_H_
#define DEDUP_SERVER_SHARD_MAP_WATCH_H_

#include <atomic>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/channel_security.h"
#include "dedup/v1/cluster.pb.h"
#include "replication/shard_layout.h"
#include "server/group_directory.h"
#include "server/shard_map_repair.h"

namespace dedup {

// Wakes a ShardMapWatch early. Thread-safe, quick (the consensus thread
// calls Notify), and safe to use after the watch is gone: shared between
// the watch and whoever wakes it.
class ShardMapWake {
 public:
  void Notify() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until notified (then clears it) or `timeout`; false once stopped.
  bool Wait(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// The map a Cluster.ShardMap answer describes (replica ids only), checked
// with ValidateLayout: it comes from another node.
[[nodiscard]] absl::StatusOr<ShardLayout> LayoutOfShardMap(
    const v1::ShardMapResponse& response);

struct ShardMapWatchOptions {
  // Not owned; must outlive the watch.
  GroupDirectory* directory = nullptr;
  // Channels to the other nodes' client ports (peer credentials).
  ChannelFactory open;
  std::shared_ptr<ShardMapWake> wake;
  // Between two looks when nothing wakes the watch.
  absl::Duration interval = absl::Seconds(1);
  // Bound of one Cluster.ShardMap call.
  absl::Duration call_timeout = absl::Seconds(2);
  // Writes a group's voters into the stored map (ShardMapPublisher); empty:
  // no repairs.
  ShardMapRepair::Publish publish;
};

// Runs on a thread of its own from construction to destruction. The first
// look at a local replica of group 0 happens in the constructor, so the
// node serves the stored map from its start.
class ShardMapWatch {
 public:
  explicit ShardMapWatch(ShardMapWatchOptions options);
  ~ShardMapWatch();
  ShardMapWatch(const ShardMapWatch&) = delete;
  ShardMapWatch& operator=(const ShardMapWatch&) = delete;

 private:
  void Run();
  // One look: the local replica of group 0 if hosted (and the founding
  // proposal on its leader), else (unless local_only) a peer.
  void Look(bool local_only);
  void FromLocal(ReplicatedStore& meta);
  void FromPeer();
  // The repair's look at the groups this node leads.
  void Repair();

  const ShardMapWatchOptions options_;
  // A founding proposal in flight (shared with its callback, which may
  // run after the watch is gone).
  std::shared_ptr<std::atomic<bool>> founding_ =
      std::make_shared<std::atomic<bool>>(false);
  // The group-0 replica asked next (rotates on failures); watch thread only.
  size_t next_peer_ = 0;
  // Watch thread only; null without options_.publish.
  std::unique_ptr<ShardMapRepair> repair_;
  std::thread thread_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_SHARD_MAP_WATCH_H_
