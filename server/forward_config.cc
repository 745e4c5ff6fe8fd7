#include "server/forward_config.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "common/reconnect_backoff.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

ABSL_FLAG(bool, forward_to_leader, true,
          "cluster mode: a node that does not lead a call's group sends the "
          "call on to the leader (one hop, with the caller's deadline and "
          "token) and relays its answer; false: it answers UNAVAILABLE "
          "naming the leader (trailing metadata dedup-leader)");
ABSL_DECLARE_FLAG(std::string, peer_tls_ca_file);

namespace dedup {
namespace {

// The CA file's text, or "" (then the system's roots) when unreadable:
// ClusterConfigFromFlags refuses such a file first in cluster mode.
std::string ReadOrEmpty(const std::string& path) {
  if (path.empty()) return "";
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return in ? text.str() : "";
}

}  // namespace

ForwardConfig ForwardConfigFromFlags(const SecurityConfig& security) {
  ForwardConfig config;
  config.enabled = absl::GetFlag(FLAGS_forward_to_leader);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (security.tls()) {
    std::string ca_file = absl::GetFlag(FLAGS_peer_tls_ca_file);
    if (ca_file.empty()) ca_file = security.tls_client_ca_file;
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadOrEmpty(ca_file);
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  config.open = [credentials](const std::string& address) {
    grpc::ChannelArguments args;
    SetReconnectBackoff(args);
    // The leader's answer is bounded by its own limits: one refused here
    // for its size would be an operation done and reported as failed.
    args.SetMaxReceiveMessageSize(-1);
    return grpc::CreateCustomChannel(address, credentials, args);
  };
  return config;
}

}  // namespace dedup
