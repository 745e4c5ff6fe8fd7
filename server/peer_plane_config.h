// The node-to-node plane's configuration, from flags: TLS files (mTLS both
// ways with the peer CA), the token this node presents, the authenticator
// that checks other nodes' credentials, and limits.
#ifndef DEDUP_SERVER_PEER_PLANE_CONFIG_H_
#define DEDUP_SERVER_PEER_PLANE_CONFIG_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "replication/peer_plane.h"
#include "server/auth.h"
#include "server/security_config.h"

namespace dedup {

// A plane listening (once Listen is called) on `raft_address` (an IPv4
// literal). With TLS on (--tls_cert_file, or --peer_tls_cert_file alone)
// peers must present a certificate signed by the peer CA
// (--peer_tls_ca_file, default --tls_client_ca_file) and are verified
// against it; with tenants on, their hello must carry a token of a tenant
// with the operator role (--peer_token_file is this node's). Plaintext only
// with no TLS and a loopback raft address, or --insecure. `auth` is not owned:
// the plane must be stopped before it goes. `log_budget_bytes` is the Raft
// log's byte budget: the message limit must exceed it (see FrameLimits).
// INVALID_ARGUMENT naming the flag.
[[nodiscard]] absl::StatusOr<std::shared_ptr<PeerPlane>> PeerPlaneFromFlags(
    const SecurityConfig& security, const std::string& raft_address,
    uint64_t log_budget_bytes, const Authorizer* auth);

}  // namespace dedup

#endif  // DEDUP_SERVER_PEER_PLANE_CONFIG_H_
