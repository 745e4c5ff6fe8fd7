#include "server/metrics_exposer.h"

#include <openssl/crypto.h>

#include <exception>
#include <fstream>
#include <sstream>
#include <vector>

#include "CivetServer.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/cluster_collector.h"
#include "server/collectors.h"
#include "server/peer_collector.h"

namespace dedup {
namespace {

// The scrape token. civetweb's begin_request gets no pointer of ours (the
// context's user data is CivetServer's own), so it is process-wide; set
// before the exposer starts and never changed while it serves.
std::string& ScrapeToken() {
  static auto* const token = new std::string;
  return *token;
}

bool BearerMatches(const char* header, const std::string& token) {
  absl::string_view value = header == nullptr ? "" : header;
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return false;
  }
  value = absl::StripAsciiWhitespace(value.substr(kScheme.size()));
  return value.size() == token.size() &&
         CRYPTO_memcmp(value.data(), token.data(), token.size()) == 0;
}

// Runs before civetweb handles each request: 0 lets it serve the page,
// non-zero means answered here (401).
int RequireBearerToken(mg_connection* connection) {
  const std::string& token = ScrapeToken();
  if (token.empty() ||
      BearerMatches(mg_get_header(connection, "Authorization"), token)) {
    return 0;
  }
  constexpr char kBody[] =
      "401 Unauthorized: send \"Authorization: Bearer <token>\" (the token "
      "of dedupd's --metrics_token_file)\n";
  mg_printf(connection,
            "HTTP/1.1 401 Unauthorized\r\n"
            "WWW-Authenticate: Bearer realm=\"dedupd metrics\"\r\n"
            "Content-Type: text/plain\r\nContent-Length: %zu\r\n"
            "Connection: close\r\n\r\n%s",
            sizeof(kBody) - 1, kBody);
  return 401;
}

}  // namespace

absl::StatusOr<std::string> ReadMetricsToken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_token_file: cannot read ", path));
  }
  const std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_token_file: ", path, " holds no token"));
  }
  return token;
}

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsExposer(
    const std::string& address, const Metrics& metrics, Store* store,
    ReplicatedStore* replicated, std::shared_ptr<const PeerPlane> peer_plane,
    const std::string& version, const std::string& git_sha,
    const std::string& bearer_token) {
  ScrapeToken() = bearer_token;
  static CivetCallbacks* const callbacks = [] {
    auto* c = new CivetCallbacks;
    c->begin_request = &RequireBearerToken;
    return c;
  }();
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // Several workers and a short read timeout: an idle connection holds one
    // worker for a few seconds, not every scrape for civetweb's default 30 s.
    exposer = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", address, "num_threads", "8",
                                 "request_timeout_ms", "3000",
                                 "keep_alive_timeout_ms", "3000"},
        callbacks);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
  // The exposer keeps weak pointers; these collectors live as long as it.
  static auto* const collectors =
      new std::vector<std::shared_ptr<prometheus::Collectable>>();
  collectors->push_back(metrics.registry());
  collectors->push_back(std::make_shared<StoreCollector>(store));
  collectors->push_back(std::make_shared<ProcessCollector>(version, git_sha));
  if (replicated != nullptr) {
    collectors->push_back(std::make_shared<ClusterCollector>(replicated));
  }
  if (peer_plane != nullptr) {
    collectors->push_back(
        std::make_shared<PeerCollector>(std::move(peer_plane)));
  }
  for (const auto& collector : *collectors) {
    exposer->RegisterCollectable(collector);
  }
  return exposer;
}

}  // namespace dedup
