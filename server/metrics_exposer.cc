#include "server/metrics_exposer.h"

#include <openssl/crypto.h>

#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"
#include "server/cluster_collector.h"
#include "server/collectors.h"
#include "server/metrics_gzip.h"
#include "server/peer_collector.h"

namespace dedup {
namespace {

bool BearerMatches(absl::string_view value, const std::string& token) {
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return false;
  }
  value = absl::StripAsciiWhitespace(value.substr(kScheme.size()));
  return value.size() == token.size() &&
         CRYPTO_memcmp(value.data(), token.data(), token.size()) == 0;
}

HttpResponse Plain(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.headers = {{"Content-Type", "text/plain; charset=utf-8"}};
  r.body = std::move(body);
  return r;
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

MetricsExposer::MetricsExposer(
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
    std::string bearer_token)
    : http_registry_(std::make_shared<prometheus::Registry>()),
      collectables_(std::move(collectables)),
      bearer_token_(std::move(bearer_token)) {
  collectables_.push_back(http_registry_);
}

absl::Status MetricsExposer::Serve(const std::string& address) {
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(
          address,
          [this](const HttpRequest& request) { return Respond(request); },
          *http_registry_);
  if (!server.ok()) return server.status();
  server_ = *std::move(server);
  return absl::OkStatus();
}

HttpResponse MetricsExposer::Respond(const HttpRequest& request) const {
  if (!bearer_token_.empty() &&
      !BearerMatches(request.authorization, bearer_token_)) {
    HttpResponse r = Plain(
        401,
        "401 Unauthorized: send \"Authorization: Bearer <token>\" (the token "
        "of dedupd's --metrics_token_file)\n");
    r.headers.emplace_back("WWW-Authenticate",
                           "Bearer realm=\"dedupd metrics\"");
    return r;
  }
  if (request.method != "GET" && request.method != "HEAD") {
    HttpResponse r = Plain(405, "405 Method Not Allowed: use GET\n");
    r.headers.emplace_back("Allow", "GET, HEAD");
    r.close = true;
    return r;
  }
  if (request.has_body) {
    HttpResponse r = Plain(400, "400 Bad Request: a GET carries no body\n");
    r.close = true;
    return r;
  }
  if (request.path != "/metrics") {
    return Plain(404, "404 Not Found: metrics are at /metrics\n");
  }
  return Scrape(request);
}

HttpResponse MetricsExposer::Scrape(const HttpRequest& request) const {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& collectable : collectables_) {
    std::vector<prometheus::MetricFamily> more = collectable->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
  }
  HttpResponse r;
  r.headers = {{"Content-Type", "text/plain; version=0.0.4; charset=utf-8"}};
  r.body = prometheus::TextSerializer().Serialize(families);
  if (request.accepts_gzip) {
    if (std::optional<std::string> zipped = Gzip(r.body)) {
      r.body = *std::move(zipped);
      r.headers.emplace_back("Content-Encoding", "gzip");
    }
  }
  return r;
}

absl::StatusOr<std::unique_ptr<MetricsExposer>> StartMetricsExposer(
    const std::string& address, const Metrics& metrics, Store* store,
    ReplicatedStore* replicated, std::shared_ptr<const PeerPlane> peer_plane,
    const std::string& version, const std::string& git_sha,
    const std::string& bearer_token,
    std::vector<std::shared_ptr<prometheus::Collectable>> extra) {
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables;
  collectables.push_back(metrics.registry());
  collectables.push_back(std::make_shared<StoreCollector>(store));
  collectables.push_back(std::make_shared<ProcessCollector>(version, git_sha));
  if (replicated != nullptr) {
    collectables.push_back(std::make_shared<ClusterCollector>(replicated));
  }
  if (peer_plane != nullptr) {
    collectables.push_back(
        std::make_shared<PeerCollector>(std::move(peer_plane)));
  }
  for (auto& collectable : extra)
    collectables.push_back(std::move(collectable));
  auto exposer =
      std::make_unique<MetricsExposer>(std::move(collectables), bearer_token);
  if (absl::Status served = exposer->Serve(address); !served.ok()) {
    return served;
  }
  return exposer;
}

}  // namespace dedup
