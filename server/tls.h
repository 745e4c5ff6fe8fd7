// gRPC server credentials for dedupd: plaintext, TLS, or TLS that verifies
// client certificates (mTLS). The certificate, key and client CA files are
// watched: a rotated certificate is served to new connections without a
// restart.
#ifndef DEDUP_SERVER_TLS_H_
#define DEDUP_SERVER_TLS_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"
#include "server/security_config.h"

namespace dedup {

// Checks that the TLS files of `config` can be read and hold what they
// should (a certificate chain, the matching private key, CA certificates),
// so a wrong path stops dedupd at start instead of failing each handshake.
// INVALID_ARGUMENT naming the flag and file.
[[nodiscard]] absl::Status CheckTlsFiles(const SecurityConfig& config);

// Credentials for grpc::ServerBuilder::AddListeningPort: insecure when TLS
// is off. With --tls_client_ca_file, a client certificate is asked for and,
// when presented, must verify (clients with bearer tokens need none).
[[nodiscard]] std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(
    const SecurityConfig& config);

}  // namespace dedup

#endif  // DEDUP_SERVER_TLS_H_
