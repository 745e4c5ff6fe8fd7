// Whether and how dedupd forwards calls to the leader (--forward_to_leader;
// server/forwarder.h).
#ifndef DEDUP_SERVER_FORWARD_CONFIG_H_
#define DEDUP_SERVER_FORWARD_CONFIG_H_

#include "common/channel_security.h"
#include "server/security_config.h"

namespace dedup {

struct ForwardConfig {
  // --forward_to_leader.
  bool enabled = true;
  // Channels to the other nodes' client ports: TLS as the node's own peer
  // calls (--peer_tls_ca_file, default --tls_client_ca_file) when TLS is
  // on, no token (a forwarded call carries its caller's), and no limit on
  // the size of an answer.
  ChannelFactory open;
};

// Reads the flags after absl::ParseCommandLine. Cannot fail: the flags it
// shares with cluster mode are checked by ClusterConfigFromFlags.
[[nodiscard]] ForwardConfig ForwardConfigFromFlags(
    const SecurityConfig& security);

}  // namespace dedup

#endif  // DEDUP_SERVER_FORWARD_CONFIG_H_
