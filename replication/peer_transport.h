// libraft 0.15's raft_uv_transport over a PeerPlane: what raft_uv_tcp did,
// with every connection authenticated by the plane first.
//
// libraft gets each connection as a uv_pipe_t over one end of a socketpair
// (allocated with raft_malloc: libraft frees it); the plane's relay threads
// hold the other end. Connections the plane accepts or dials reach the loop
// thread through a mailbox and uv_async_send.
//
// Thread safety: libraft calls the transport on its loop thread only; the
// plane's threads touch only the mailbox.
#ifndef DEDUP_REPLICATION_PEER_TRANSPORT_H_
#define DEDUP_REPLICATION_PEER_TRANSPORT_H_

#include <uv.h>

// libraft 0.15's headers declare C functions without extern "C".
extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "replication/peer_plane.h"

namespace dedup {

class PeerTransport {
 public:
  // `group` is what the plane checks inbound peers and frames against for
  // group `group_id`; the caller keeps it up to date.
  PeerTransport(uv_loop_t* loop, std::shared_ptr<PeerPlane> plane,
                uint32_t group_id, std::shared_ptr<PeerGroup> group);
  // Unregisters the group if libraft did not close the transport (a failed
  // start): nothing reaches the loop afterwards.
  ~PeerTransport();
  PeerTransport(const PeerTransport&) = delete;
  PeerTransport& operator=(const PeerTransport&) = delete;

  // On the loop's thread before the loop runs: 0 or a libuv error.
  [[nodiscard]] int Init();
  // Loop thread, when libraft will never close the transport (its start
  // failed before raft_init succeeded): closes what Init opened; `closed`
  // runs on the loop thread once the loop holds nothing of it.
  void CloseUnused(std::function<void()> closed);
  // What raft_uv_init takes. libraft closes it through its close method.
  struct raft_uv_transport* raft() {
    return &transport_;
  }

 private:
  struct Mailbox;

  static PeerTransport* Of(struct raft_uv_transport* t);
  static int OnInit(struct raft_uv_transport* t, raft_id id,
                    const char* address);
  static int OnListen(struct raft_uv_transport* t, raft_uv_accept_cb cb);
  static int OnConnect(struct raft_uv_transport* t, struct raft_uv_connect* req,
                       raft_id id, const char* address, raft_uv_connect_cb cb);
  static void OnClose(struct raft_uv_transport* t,
                      raft_uv_transport_close_cb cb);
  static void OnAsync(uv_async_t* handle);
  static void OnAsyncClosed(uv_handle_t* handle);

  // A uv_pipe_t (raft_malloc'd) over `fd`, or null (fd closed).
  uv_stream_t* OpenPipe(int fd);

  uv_loop_t* const loop_;
  const std::shared_ptr<PeerPlane> plane_;
  const uint32_t group_id_;
  const std::shared_ptr<PeerGroup> group_;
  const std::shared_ptr<Mailbox> mailbox_;
  struct raft_uv_transport transport_ {};
  uv_async_t async_{};
  // Loop thread only.
  raft_id id_ = 0;
  std::string address_;
  raft_uv_accept_cb accept_cb_ = nullptr;
  raft_uv_transport_close_cb close_cb_ = nullptr;
  std::function<void()> unused_closed_;
  bool closed_ = false;
  absl::flat_hash_map<struct raft_uv_connect*, raft_uv_connect_cb> dialing_;
};

}  // namespace dedup

#endif  // DEDUP_REPLICATION_PEER_TRANSPORT_H_
