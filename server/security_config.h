// Transport security and authentication settings of dedupd (see --help):
// TLS (with client certificates: mTLS), the tenants file, and the rule that
// plaintext or unauthenticated serving is only the default on loopback.
#ifndef DEDUP_SERVER_SECURITY_CONFIG_H_
#define DEDUP_SERVER_SECURITY_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "server/auth_failure_limiter.h"

namespace dedup {

struct SecurityConfig {
  // PEM files; empty cert and key: plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  // CA bundle verifying client certificates; empty: none are asked for.
  std::string tls_client_ca_file;
  // Seconds between checks of the TLS files for a rotation.
  int tls_reload_interval_s = 10;
  // Empty: authentication off.
  std::string tenants_file;
  // Allows plaintext or authentication off on a non-loopback address.
  bool insecure = false;
  // Failed authentications allowed per peer address.
  AuthFailureLimits auth_failures;

  bool tls() const { return !tls_cert_file.empty(); }
};

// Reads the flags; INVALID_ARGUMENT naming the flag when they are
// incoherent, including plaintext or no tenants file on an `address` that
// does not bind only to loopback (server/loopback_address.h: what its host
// resolves to; a host that does not resolve is an error) without
// --insecure. Warnings (insecure serving allowed by --insecure) are written
// to stderr.
[[nodiscard]] absl::StatusOr<SecurityConfig> SecurityConfigFromFlags(
    const std::string& address);

}  // namespace dedup

#endif  // DEDUP_SERVER_SECURITY_CONFIG_H_
