// libraft 0.15's TCP transport (raft_uv_tcp) with Nagle's algorithm turned
// off on every connection it makes or accepts.
//
// The stock transport never sets TCP_NODELAY, so a small message written
// while an earlier one is unacknowledged (an AppendEntries result behind a
// heartbeat, an entry behind another) waits for the peer's delayed ACK: up to
// ~40 ms on Linux, which showed as the group's latency tail. This wraps the
// transport's listen and connect, sets TCP_NODELAY on each stream they hand
// to raft_uv, and otherwise leaves the transport as it is.
//
// Thread safety: as raft_uv_tcp, loop thread only.
#ifndef DEDUP_REPLICATION_NO_DELAY_TRANSPORT_H_
#define DEDUP_REPLICATION_NO_DELAY_TRANSPORT_H_

#include <uv.h>

// libraft 0.15's headers declare C functions without extern "C".
extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

namespace dedup {

// Lives as long as raft_uv uses it; `transport` must stay its first member:
// libraft hands the wrappers that pointer back.
struct NoDelayTransport {
  struct raft_uv_transport transport {};
  int (*listen)(struct raft_uv_transport*, raft_uv_accept_cb) = nullptr;
  int (*connect)(struct raft_uv_transport*, struct raft_uv_connect*, raft_id,
                 const char*, raft_uv_connect_cb) = nullptr;
  raft_uv_accept_cb accepted = nullptr;
};

// raft_uv_tcp_init on `t->transport`, then the wrapping. Returns its error
// code. Close with raft_uv_tcp_close(&t->transport) as usual.
[[nodiscard]] int NoDelayTcpTransportInit(NoDelayTransport* t, uv_loop_t* loop);

}  // namespace dedup

#endif  // DEDUP_REPLICATION_NO_DELAY_TRANSPORT_H_
