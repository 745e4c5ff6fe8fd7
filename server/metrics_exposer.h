// The /metrics endpoint of dedupd.
#ifndef DEDUP_SERVER_METRICS_EXPOSER_H_
#define DEDUP_SERVER_METRICS_EXPOSER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/registry.h"
#include "replication/peer_plane.h"
#include "replication/replicated_store.h"
#include "server/metrics.h"
#include "server/metrics_http_server.h"
#include "storage/store.h"

namespace dedup {

// A /metrics endpoint: what it answers, and (once Serve succeeded) the
// server answering it. Serving stops when it is destroyed.
class MetricsExposer {
 public:
  // With a non-empty `bearer_token`, requests must carry it (see below).
  MetricsExposer(
      std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
      std::string bearer_token);

  // Listens on `address` and serves from a thread of its own. Call once.
  [[nodiscard]] absl::Status Serve(const std::string& address);

  // The bound port (after Serve).
  [[nodiscard]] int port() const { return server_->port(); }

  // The answer to one request. Thread-safe (reads only what is fixed at
  // construction).
  [[nodiscard]] HttpResponse Respond(const HttpRequest& request) const;

 private:
  [[nodiscard]] HttpResponse Scrape(const HttpRequest& request) const;

  // The metrics port's own counters (dedup_metrics_http_*).
  const std::shared_ptr<prometheus::Registry> http_registry_;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  const std::string bearer_token_;
  // Last: destroyed (its thread joined) before what its thread reads.
  std::unique_ptr<MetricsHttpServer> server_;
};

// Serves /metrics (GET or HEAD; gzip when asked) on `address`: the counters
// of `metrics`, the store's gauges, process metrics, the metrics port's own
// counters and (with `replicated`, may be null) the group's and its peer
// plane's (`peer_plane`, may be null), and `extra`'s. Any other path is 404,
// any other method 405, a malformed request 400/414/431/505
// (server/metrics_http_*). With a non-empty `bearer_token`, every request
// without "Authorization: Bearer <bearer_token>" is answered 401 (the page
// names tenants and their stored bytes). The exposer reads `metrics`, `store`
// and `replicated`: destroy it before them. UNAVAILABLE when the address cannot
// be bound.
[[nodiscard]] absl::StatusOr<std::unique_ptr<MetricsExposer>>
StartMetricsExposer(
    const std::string& address, const Metrics& metrics, Store* store,
    ReplicatedStore* replicated, std::shared_ptr<const PeerPlane> peer_plane,
    const std::string& version, const std::string& git_sha,
    const std::string& bearer_token = "",
    std::vector<std::shared_ptr<prometheus::Collectable>> extra = {});

// The token in `path` (surrounding whitespace dropped), for
// StartMetricsExposer; INVALID_ARGUMENT naming --metrics_token_file when the
// file cannot be read or holds no token.
[[nodiscard]] absl::StatusOr<std::string> ReadMetricsToken(
    const std::string& path);

}  // namespace dedup

#endif  // DEDUP_SERVER_METRICS_EXPOSER_H_
