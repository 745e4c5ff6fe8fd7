// The node-to-node Raft plane: one TCP listener per node on its Raft address
// and the connections to and from the other nodes, each authenticated
// (mTLS, then a hello carrying a token, see peer_hello.h) before a single
// byte reaches libraft, and each inbound byte checked by a FrameValidator.
//
// libraft sees each connection as one end of a socketpair (peer_transport.h
// hands it over); a relay copies between the other end and the network. The
// relays of one direction to or from one peer node share one thread (a
// RelayPump, peer_plane_pump.h): the groups on a node pair are woken
// together, not once per connection. libraft's peer connections carry one
// direction only (the dialling side writes messages, the accepting side reads),
// so each relay does blocking I/O one way: an inbound relay reads the network
// and writes the socketpair, an outbound relay the reverse. Closing either side
// ends the relay, which closes the other; libraft reconnects by itself.
//
// Several Raft groups may share one plane: the hello names the group.
//
// Thread safety: every method is thread-safe. Ignores SIGPIPE process-wide
// (a write to a closed peer must fail, not kill the process).
#ifndef DEDUP_REPLICATION_PEER_PLANE_H_
#define DEDUP_REPLICATION_PEER_PLANE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "replication/peer_hello.h"
#include "replication/peer_link.h"
#include "replication/peer_metrics.h"
#include "replication/peer_plane_pump.h"
#include "replication/raft_frame.h"

namespace dedup {

// What an inbound peer presented, for the authenticator.
struct PeerCredentials {
  uint32_t group_id = 0;
  uint64_t node_id = 0;               // claimed in the hello
  std::string raft_address;           // claimed in the hello
  std::string token;                  // from the hello, may be empty
  bool certificate_verified = false;  // TLS client certificate, peer CA
  std::string certificate_subject;    // its subject, "" without one
  std::string remote_address;         // ip:port the connection came from
};

// OK to accept, PERMISSION_DENIED (with the reason) to refuse. Called on the
// listener thread: must be quick and must not block.
using PeerAuthenticator = std::function<absl::Status(const PeerCredentials&)>;

struct PeerPlaneOptions {
  std::string listen_address;    // IPv4 literal host:port; port 0 for tests
  std::shared_ptr<PeerTls> tls;  // null: plaintext
  std::string token;             // sent in this node's hellos
  // A connection that has not finished TLS and its hello by then is closed;
  // also bounds dialling (connect, TLS, hello, answer).
  int handshake_timeout_ms = 5000;
  // Connections in handshake at once; more are closed at once (busy).
  int max_handshakes = 256;
  FrameLimits frame_limits;
  PeerAuthenticator authenticator;  // null: accept whoever passes TLS
};

// One Raft group as the plane sees it: its current term (for the frame
// validator) and members (who may connect). Written by the group's loop
// thread, read by the plane's threads.
class PeerGroup {
 public:
  uint64_t term() const { return term_.load(std::memory_order_relaxed); }
  void set_term(uint64_t term) { term_.store(term, std::memory_order_relaxed); }
  // Empty (a node joining, before the leader sends it the configuration):
  // any authenticated peer may connect.
  void SetMembers(std::vector<uint64_t> ids) ABSL_LOCKS_EXCLUDED(mu_);
  bool IsMember(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  std::atomic<uint64_t> term_{0};
  mutable absl::Mutex mu_;
  std::vector<uint64_t> members_ ABSL_GUARDED_BY(mu_);
};

// Receives an accepted connection's libraft end (the caller owns `fd`) and
// who it is from. Called with the plane's lock held: must only queue.
using PeerDeliver = std::function<void(int fd, uint64_t node_id,
                                       const std::string& raft_address)>;

class PeerPlane {
 public:
  // Does not listen yet (see Listen).
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<PeerPlane>> Create(
      PeerPlaneOptions options);
  // Stop().
  ~PeerPlane();

  // Binds the listen address (backlog 1024) and starts the listener
  // thread. Idempotent. UNAVAILABLE naming the address when it cannot bind.
  [[nodiscard]] absl::Status Listen() ABSL_LOCKS_EXCLUDED(mu_);
  // The bound port (after Listen).
  int port() const { return port_; }

  // Inbound hellos naming `group_id` go to `deliver` until UnregisterGroup
  // (after which `deliver` is never called again).
  void RegisterGroup(uint32_t group_id, std::shared_ptr<PeerGroup> group,
                     PeerDeliver deliver) ABSL_LOCKS_EXCLUDED(mu_);
  void UnregisterGroup(uint32_t group_id) ABSL_LOCKS_EXCLUDED(mu_);

  struct Dial {
    uint32_t group_id = 0;
    uint64_t self_id = 0;      // this node, as the hello says
    std::string self_address;  // this node's Raft address
    std::string peer_address;  // IPv4 literal host:port
  };
  // Dials on a thread of its own: TCP, TLS, hello, answer; then `done`
  // gets the libraft end of a socketpair (its owner is `done`), or -1 on
  // failure, on that thread; the thread then relays until either side
  // closes.
  void Connect(Dial dial, std::function<void(int fd)> done)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Closes the listener and every connection, joins every thread.
  // Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  const PeerMetrics& metrics() const { return metrics_; }

 private:
  struct Registered {
    std::shared_ptr<PeerGroup> group;
    PeerDeliver deliver;
  };
  struct Worker {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  struct Handshake;  // peer_listener.cc

  explicit PeerPlane(PeerPlaneOptions options);

  // Threads and fds a Stop must end: false once stopping.
  bool Spawn(absl::AnyInvocable<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);
  bool Track(int fd) ABSL_LOCKS_EXCLUDED(mu_);
  void CloseTracked(int fd) ABSL_LOCKS_EXCLUDED(mu_);

  // Listener thread (peer_listener.cc).
  void ListenLoop(int epoll_fd);
  void AcceptAll(int epoll_fd, absl::flat_hash_map<int, Handshake>& pending);
  // `finished`: `h` was accepted or refused (its fd is no longer ours).
  void Advance(int epoll_fd, Handshake& h, bool& finished);
  void ReadHello(int epoll_fd, Handshake& h, bool& finished);
  void Decide(int epoll_fd, Handshake& h, const PeerHello& hello,
              bool& finished);
  void Refuse(Handshake& h, HandshakeResult result, PeerHelloStatus status,
              absl::string_view why);
  PeerHelloStatus Authorize(const Handshake& h, const PeerHello& hello,
                            std::string& why) ABSL_LOCKS_EXCLUDED(mu_);
  void Establish(std::unique_ptr<PeerLink> link, const PeerHello& hello,
                 const std::string& remote) ABSL_LOCKS_EXCLUDED(mu_);

  // Hands a connection to the pump of its direction and peer (`key`),
  // started on first use. A relay's connection is counted in
  // metrics_.connections before it starts; its end uncounts it. False once
  // stopping (the connection is untouched: the caller closes it).
  [[nodiscard]] bool Pump(RelayPump::Direction direction,
                          const std::string& key, PumpedConnection& connection)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A pump's connection ended (its thread): closes it, uncounts it.
  void RelayEnded(PumpedConnection& connection,
                  std::optional<FrameReject> reject);
  void DialAndRelay(const Dial& dial, const std::function<void(int)>& done);
  std::unique_ptr<PeerLink> DialHandshake(const Dial& dial, int fd);

  // One line per refusal, at most a few a second (the rest are counted and
  // reported with the next line).
  void LogRefusal(absl::string_view remote, absl::string_view why)
      ABSL_LOCKS_EXCLUDED(log_mu_);

  const PeerPlaneOptions options_;
  PeerMetrics metrics_;
  std::atomic<int> port_{0};

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int listen_fd_ ABSL_GUARDED_BY(mu_) = -1;
  int wake_fd_ ABSL_GUARDED_BY(mu_) = -1;  // eventfd ending the listener
  std::thread listener_;
  absl::flat_hash_map<uint32_t, Registered> groups_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int> fds_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Worker>> workers_ ABSL_GUARDED_BY(mu_);
  // By direction and peer ("in/<node id>", "out/<address>").
  absl::flat_hash_map<std::string, std::unique_ptr<RelayPump>> pumps_
      ABSL_GUARDED_BY(mu_);

  absl::Mutex log_mu_;
  absl::Time log_window_ ABSL_GUARDED_BY(log_mu_);
  int logged_in_window_ ABSL_GUARDED_BY(log_mu_) = 0;
  uint64_t suppressed_ ABSL_GUARDED_BY(log_mu_) = 0;
};

}  // namespace dedup

#endif  // DEDUP_REPLICATION_PEER_PLANE_H_
