// Counters of the node-to-node plane, exported by the server as
// dedup_peer_handshakes_total{result}, dedup_peer_frames_rejected_total
// {reason} and the gauge dedup_peer_connections.
//
// Thread-safe: plain atomics, written by the plane's threads and read at
// scrape time.
#ifndef DEDUP_REPLICATION_PEER_METRICS_H_
#define DEDUP_REPLICATION_PEER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>

#include "replication/raft_frame.h"

namespace dedup {

// How an inbound connection's handshake ended: the label `result`.
enum class HandshakeResult {
  kOk,
  kTlsFailed,     // TLS handshake or certificate refused
  kBadHello,      // wrong magic, malformed hello
  kUnauthorized,  // authenticator or membership refused, unknown group
  kTimeout,       // not done within --peer_handshake_timeout_ms
  kBusy,          // too many connections already in handshake
};
inline constexpr int kHandshakeResults = 6;
const char* HandshakeResultName(HandshakeResult result);

// One more than FrameReject's last value.
inline constexpr int kFrameRejects =
    static_cast<int>(FrameReject::kEntryLength) + 1;

struct PeerMetrics {
  std::array<std::atomic<uint64_t>, kHandshakeResults> handshakes{};
  std::array<std::atomic<uint64_t>, kFrameRejects> frames_rejected{};
  // Established connections, both directions, relayed to libraft now.
  std::atomic<int64_t> connections{0};

  void Count(HandshakeResult result) {
    handshakes[static_cast<int>(result)].fetch_add(1);
  }
  void Count(FrameReject reason) {
    frames_rejected[static_cast<int>(reason)].fetch_add(1);
  }
};

}  // namespace dedup

#endif  // DEDUP_REPLICATION_PEER_METRICS_H_
