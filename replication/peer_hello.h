// The first bytes of every node-to-node Raft connection (after the TLS
// handshake when TLS is on; the same bytes in plaintext mode): who is
// calling, for which group, with which credential. Nothing reaches libraft
// before the receiver has parsed, authenticated and accepted them.
//
// Contract (all integers little endian):
//   client -> server:
//     8 bytes   magic "DDPEER01" (the version is its last two characters)
//     u32       group id (the Raft group on the receiving node; today 0)
//     u64       sender's node id (> 0)
//     u16       address length (1..kMaxHelloAddress), then the sender's
//               Raft address (host:port, what libraft knows it by)
//     u16       token length (0..kMaxHelloToken), then the token bytes
//   server -> client: one status byte (PeerHelloStatus); the server closes
//     the connection after any status but kOk. After kOk the client sends
//     libraft's messages; the server never sends another byte.
// Any byte after the hello and before the status is a protocol error
// (kMalformed).
#ifndef DEDUP_REPLICATION_PEER_HELLO_H_
#define DEDUP_REPLICATION_PEER_HELLO_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace dedup {

inline constexpr char kPeerHelloMagic[] = "DDPEER01";  // 8 bytes, no NUL
inline constexpr size_t kMaxHelloAddress = 255;
inline constexpr size_t kMaxHelloToken = 4096;
// Largest valid hello: magic, group, node, two lengths and their bytes.
inline constexpr size_t kMaxHelloBytes =
    8 + 4 + 8 + 2 + kMaxHelloAddress + 2 + kMaxHelloToken;

enum class PeerHelloStatus : uint8_t {
  kOk = 0,
  kBadMagic = 1,      // not "DDPEER01": another protocol or version
  kUnknownGroup = 2,  // no such Raft group on this node
  kUnauthorized = 3,  // credential or node id refused
  kMalformed = 4,     // lengths out of bounds, node id 0, trailing bytes
  kBusy = 5,          // too many connections in handshake
};
const char* PeerHelloStatusName(PeerHelloStatus status);

struct PeerHello {
  uint32_t group_id = 0;
  uint64_t node_id = 0;
  std::string address;
  std::string token;
};

// The hello's bytes. `hello` must be within the bounds above.
[[nodiscard]] std::string EncodePeerHello(const PeerHello& hello);

enum class HelloParse { kIncomplete, kDone, kBadMagic, kMalformed };

// Parses the start of `bytes`. kIncomplete: more bytes are needed (never
// once kMaxHelloBytes are there). kDone: `*hello` is set and `*consumed`
// says how many bytes it took. Pure; any input is safe.
[[nodiscard]] HelloParse ParsePeerHello(absl::string_view bytes,
                                        PeerHello* hello, size_t* consumed);

}  // namespace dedup

#endif  // DEDUP_REPLICATION_PEER_HELLO_H_
