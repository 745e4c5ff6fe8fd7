#include "server/security_config.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "server/loopback_address.h"

ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain the server presents; with --tls_key_file "
          "turns TLS on. Reloaded when the file changes");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA bundle verifying client certificates (mTLS): a client that "
          "presents one must present a valid one, and its names (SANs) can "
          "identify a tenant (cert_sans)");
ABSL_FLAG(int32_t, tls_reload_interval_s, 10,
          "how often the TLS files are checked for a rotation, seconds");
ABSL_FLAG(std::string, tenants_file, "",
          "JSON file of tenants: credentials (token digests, certificate "
          "names), namespace prefixes, roles, limits (see README). Empty: "
          "authentication off. Reloaded on SIGHUP and when it changes");
ABSL_FLAG(double, auth_failures_per_s, 10,
          "failed authentications (no credential, an unknown token or "
          "certificate) each client address regains per second; once it has "
          "none left, its calls are refused RESOURCE_EXHAUSTED with a retry "
          "delay before any credential is checked. 0: no limit");
ABSL_FLAG(int32_t, auth_failure_burst, 100,
          "failed authentications a client address may make in a row before "
          "--auth_failures_per_s applies");
ABSL_FLAG(bool, insecure, false,
          "allow plaintext (no --tls_cert_file) or authentication off (no "
          "--tenants_file) on a non-loopback --address");

namespace dedup {

absl::StatusOr<SecurityConfig> SecurityConfigFromFlags(
    const std::string& address) {
  SecurityConfig config;
  config.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  config.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  config.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  config.tls_reload_interval_s = absl::GetFlag(FLAGS_tls_reload_interval_s);
  config.tenants_file = absl::GetFlag(FLAGS_tenants_file);
  config.insecure = absl::GetFlag(FLAGS_insecure);
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file: give both or neither");
  }
  if (!config.tls_client_ca_file.empty() && !config.tls()) {
    return absl::InvalidArgumentError(
        "--tls_client_ca_file: needs --tls_cert_file and --tls_key_file "
        "(client certificates are only asked for over TLS)");
  }
  config.auth_failures.per_s = absl::GetFlag(FLAGS_auth_failures_per_s);
  config.auth_failures.burst = absl::GetFlag(FLAGS_auth_failure_burst);
  if (!(config.auth_failures.per_s >= 0)) {
    return absl::InvalidArgumentError("--auth_failures_per_s: must be >= 0");
  }
  if (config.auth_failures.burst < 1) {
    return absl::InvalidArgumentError("--auth_failure_burst: must be >= 1");
  }
  if (config.tls_reload_interval_s < 1) {
    return absl::InvalidArgumentError("--tls_reload_interval_s: must be >= 1");
  }
  std::vector<std::string> missing;
  if (!config.tls()) missing.push_back("plaintext (no --tls_cert_file)");
  if (config.tenants_file.empty()) {
    missing.push_back("authentication off (no --tenants_file)");
  }
  if (missing.empty()) return config;
  absl::StatusOr<bool> loopback = BindsOnlyLoopback(address, "--address");
  if (!loopback.ok()) return loopback.status();
  if (*loopback) return config;
  const std::string what = absl::StrJoin(missing, " and ");
  if (!config.insecure) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--address ", address,
        " does not bind only to loopback: refusing to serve ", what,
        " on it; give --tls_cert_file/--tls_key_file and --tenants_file, or "
        "--insecure to accept the risk"));
  }
  LogWarning("WARNING: serving ", what, " on ", address,
             " (--insecure): anyone who can reach it can read and forget "
             "every key");
  return config;
}

}  // namespace dedup
