// One thread relaying every connection of one direction between this node
// and one peer node (peer_plane.h): it sleeps in epoll_wait until any of
// them has bytes, so a burst of messages of many Raft groups to or from that
// node (their heartbeats are ticked together) wakes it once, where a thread
// per connection woke once per message.
//
// An outbound connection copies its libraft end (socketpair) to the network
// and ends when the network side turns readable (the receiver never sends:
// it closed); an inbound one copies the network, checked by its frame
// validator, to its libraft end. Network I/O stays blocking (TLS): the
// connections of one pump share one peer and one network path, so one that
// waits for the network holds back only traffic that would wait as well.
//
// Thread safety: Add and Stop are thread-safe; `ended` runs on the pump's
// thread.
#ifndef DEDUP_REPLICATION_PEER_PLANE_PUMP_H_
#define DEDUP_REPLICATION_PEER_PLANE_PUMP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "replication/peer_link.h"
#include "replication/raft_frame.h"

namespace dedup {

struct PumpedConnection {
  std::unique_ptr<PeerLink> link;  // the network side
  int pair_fd = -1;                // the relay's end of libraft's socketpair
  // Inbound only: checks every byte from the network before libraft.
  std::unique_ptr<FrameValidator> validator;
  std::string remote;  // for log lines
};

class RelayPump {
 public:
  // Called once per connection when it ends (closed by either side, a
  // failed write, a rejected frame: `reject`), or when the pump stops; the
  // callee closes its fds.
  using Ended = std::function<void(PumpedConnection& connection,
                                   std::optional<FrameReject> reject)>;

  enum class Direction { kInbound, kOutbound };
  // Starts the thread. False from ok() when epoll or eventfd failed.
  RelayPump(Direction direction, Ended ended);
  // Stop().
  ~RelayPump();
  RelayPump(const RelayPump&) = delete;
  RelayPump& operator=(const RelayPump&) = delete;

  bool ok() const { return epoll_fd_ >= 0 && wake_fd_ >= 0; }
  // False (the connection is handed back untouched) once stopping.
  [[nodiscard]] bool Add(PumpedConnection& connection) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends every connection (`ended` runs for each) and joins the thread.
  // Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    PumpedConnection connection;
  };

  void Run();
  void AdoptAdded() ABSL_LOCKS_EXCLUDED(mu_);
  // Relays what is ready on entry `id`'s side `network`: false once it ended.
  bool Relay(uint64_t id, Entry& entry, bool network, std::vector<char>& buf,
             std::optional<FrameReject>& reject);
  void End(uint64_t id, std::optional<FrameReject> reject);

  const Direction direction_;
  const Ended ended_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<PumpedConnection> added_ ABSL_GUARDED_BY(mu_);

  // Pump thread.
  uint64_t next_id_ = 1;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Entry>> entries_;
};

}  // namespace dedup

#endif  // DEDUP_REPLICATION_PEER_PLANE_PUMP_H_
