#include "server/peer_plane_config.h"

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/channel_security.h"
#include "common/log.h"
#include "server/loopback_address.h"

ABSL_DECLARE_FLAG(std::string, peer_token_file);
ABSL_DECLARE_FLAG(std::string, peer_tls_ca_file);

ABSL_FLAG(std::string, peer_tls_cert_file, "",
          "cluster mode: PEM certificate chain this node presents to other "
          "nodes, as server and as client (default: --tls_cert_file; it "
          "needs both serverAuth and clientAuth uses). Given without client "
          "TLS, Raft still uses mTLS");
ABSL_FLAG(std::string, peer_tls_key_file, "",
          "PEM private key of --peer_tls_cert_file (default: --tls_key_file)");
ABSL_FLAG(uint32_t, peer_handshake_timeout_ms, 5000,
          "cluster mode: a Raft peer connection that has not finished its "
          "TLS handshake and hello by then is closed (also bounds dialling)");
ABSL_FLAG(uint32_t, max_raft_message_mb, 0,
          "cluster mode: largest Raft message (header and payload) accepted "
          "from a peer, MiB; a larger one closes the connection. 0 (the "
          "default): --raft_log_budget_mb + 64, since libraft sends a lagging "
          "follower its whole backlog in one message; at least that much");

namespace dedup {
namespace {

absl::StatusOr<std::shared_ptr<PeerTls>> PeerTlsFromFlags(
    const SecurityConfig& security) {
  PeerTlsFiles files;
  files.cert_file = absl::GetFlag(FLAGS_peer_tls_cert_file);
  files.key_file = absl::GetFlag(FLAGS_peer_tls_key_file);
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--peer_tls_cert_file and --peer_tls_key_file: give both or neither");
  }
  if (files.cert_file.empty()) {
    files.cert_file = security.tls_cert_file;
    files.key_file = security.tls_key_file;
  }
  files.ca_file = absl::GetFlag(FLAGS_peer_tls_ca_file);
  if (files.ca_file.empty()) files.ca_file = security.tls_client_ca_file;
  if (files.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--peer_tls_ca_file: needed with TLS in cluster mode (the CA of the "
        "other nodes' certificates) unless --tls_client_ca_file is that CA");
  }
  absl::StatusOr<std::shared_ptr<PeerTls>> tls = PeerTls::FromFiles(files);
  if (!tls.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--peer_tls_cert_file/--peer_tls_key_file/--peer_tls_ca_file: ",
        tls.status().message()));
  }
  return tls;
}

// Peers use mTLS when the client port has TLS, or when given files of their
// own (a group whose clients are served plaintext on a private network may
// still encrypt and authenticate Raft).
bool PeerTlsOn(const SecurityConfig& security) {
  return security.tls() || !absl::GetFlag(FLAGS_peer_tls_cert_file).empty() ||
         !absl::GetFlag(FLAGS_peer_tls_key_file).empty();
}

// Plaintext Raft only where clients may be served plaintext too.
absl::Status CheckPlaintextAllowed(const SecurityConfig& security,
                                   const std::string& raft_address) {
  if (PeerTlsOn(security)) return absl::OkStatus();
  absl::StatusOr<bool> loopback =
      BindsOnlyLoopback(raft_address, "--raft_address");
  if (!loopback.ok()) return loopback.status();
  if (*loopback) return absl::OkStatus();
  if (!security.insecure) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--raft_address ", raft_address,
        " is not loopback: refusing plaintext, unauthenticated Raft traffic "
        "on it; give --peer_tls_cert_file/--peer_tls_key_file/"
        "--peer_tls_ca_file or --tls_cert_file/--tls_key_file (peers then "
        "use mTLS), or --insecure to accept the risk"));
  }
  LogWarning("WARNING: Raft peers talk plaintext on ", raft_address,
             " (--insecure): anyone who can reach it can join the "
             "conversation");
  return absl::OkStatus();
}

PeerAuthenticator Authenticator(bool tls, const Authorizer* auth) {
  return [tls, auth](const PeerCredentials& peer) -> absl::Status {
    if (tls && !peer.certificate_verified) {
      return absl::PermissionDeniedError(
          "no certificate verified by the peer CA");
    }
    if (auth != nullptr && auth->enabled()) {
      return auth->CheckToken(peer.token, TenantRole::kOperator);
    }
    return absl::OkStatus();
  };
}

}  // namespace

absl::StatusOr<std::shared_ptr<PeerPlane>> PeerPlaneFromFlags(
    const SecurityConfig& security, const std::string& raft_address,
    uint64_t log_budget_bytes, const Authorizer* auth) {
  if (absl::Status s = CheckPlaintextAllowed(security, raft_address); !s.ok()) {
    return s;
  }
  PeerPlaneOptions options;
  options.listen_address = raft_address;
  if (PeerTlsOn(security)) {
    absl::StatusOr<std::shared_ptr<PeerTls>> tls = PeerTlsFromFlags(security);
    if (!tls.ok()) return tls.status();
    options.tls = *std::move(tls);
  }
  const std::string token_file = absl::GetFlag(FLAGS_peer_token_file);
  if (!token_file.empty()) {
    absl::StatusOr<ChannelSecurity> read =
        ChannelSecurityFromFiles("", "", "", token_file);
    if (!read.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--peer_token_file: ", read.status().message()));
    }
    options.token = read->bearer_token;
  }
  const uint32_t timeout_ms = absl::GetFlag(FLAGS_peer_handshake_timeout_ms);
  if (timeout_ms == 0 || timeout_ms > 600000) {
    return absl::InvalidArgumentError(
        "--peer_handshake_timeout_ms: must be in 1..600000");
  }
  options.handshake_timeout_ms = static_cast<int>(timeout_ms);
  // libraft 0.15 puts every entry a follower lacks into one AppendEntries,
  // so a limit below what the log holds would refuse a catch-up for good.
  const uint64_t floor_mb = (log_budget_bytes >> 20) + 64;
  uint64_t message_mb = absl::GetFlag(FLAGS_max_raft_message_mb);
  if (message_mb == 0) message_mb = floor_mb;
  if (message_mb < floor_mb || message_mb > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_raft_message_mb: must be in ", floor_mb,
        "..65536 (--raft_log_budget_mb + 64: libraft sends a lagging "
        "follower its whole backlog in one message), or 0 for that"));
  }
  options.frame_limits.max_message_bytes = message_mb << 20;
  options.authenticator = Authenticator(PeerTlsOn(security), auth);
  absl::StatusOr<std::shared_ptr<PeerPlane>> plane =
      PeerPlane::Create(std::move(options));
  if (!plane.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--raft_address: ", plane.status().message()));
  }
  return plane;
}

}  // namespace dedup
