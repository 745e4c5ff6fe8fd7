// How a client reaches dedupd securely: TLS (verifying the server against a
// CA), optionally with a client certificate (mTLS), and a bearer token sent
// on every call as "authorization: Bearer <token>".
//
// The token is added by a channel interceptor, not by gRPC call credentials:
// gRPC refuses call credentials on plaintext channels, and a token over
// plaintext on loopback is what local development with a tenants file needs.
// Over a network, use TLS: a token sent in plaintext can be read on the way.
#ifndef DEDUP_COMMON_CHANNEL_SECURITY_H_
#define DEDUP_COMMON_CHANNEL_SECURITY_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"

namespace dedup {

// Opens a channel to "host:port" (as in client/leader_router.h).
using ChannelFactory =
    std::function<std::shared_ptr<grpc::Channel>(const std::string& address)>;

struct ChannelSecurity {
  // TLS when true. An empty root CA uses the system's roots.
  bool tls = false;
  std::string root_ca_pem;
  // Client certificate chain and key (mTLS); both or neither.
  std::string client_cert_pem;
  std::string client_key_pem;
  // Overrides the name checked against the server's certificate (and sent
  // as SNI), for servers reached by an address their certificate does not
  // name. Empty: the host of the address.
  std::string server_name;
  // Sent with every call; empty: none.
  std::string bearer_token;
};

// Reads the files named (any may be empty: not used). TLS is on when any TLS
// file is given. The token file holds the token (surrounding whitespace is
// ignored). INVALID_ARGUMENT naming the file when one cannot be read or is
// empty.
[[nodiscard]] absl::StatusOr<ChannelSecurity> ChannelSecurityFromFiles(
    const std::string& ca_file, const std::string& cert_file,
    const std::string& key_file, const std::string& token_file);

// Opens channels with `security` and the short reconnect backoff of
// common/reconnect_backoff.h. Thread-safe; the factory may be copied.
[[nodiscard]] ChannelFactory SecureChannelFactory(ChannelSecurity security);

}  // namespace dedup

#endif  // DEDUP_COMMON_CHANNEL_SECURITY_H_
