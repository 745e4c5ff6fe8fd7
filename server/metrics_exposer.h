// The /metrics endpoint of dedupd.
#ifndef DEDUP_SERVER_METRICS_EXPOSER_H_
#define DEDUP_SERVER_METRICS_EXPOSER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/exposer.h"
#include "replication/peer_plane.h"
#include "replication/replicated_store.h"
#include "server/metrics.h"
#include "storage/store.h"

namespace dedup {

// Serves /metrics on `address`: the counters of `metrics`, the store's
// gauges, process metrics and (with `replicated`, may be null) the group's
// and its peer plane's (`peer_plane`, may be null).
// With a non-empty `bearer_token`, every request without "Authorization:
// Bearer <bearer_token>" is answered 401 (the page names tenants and their
// stored bytes); at most one such endpoint per process. The exposer reads
// `store` and `replicated`: destroy it before closing the store.
// UNAVAILABLE when the address cannot be bound.
[[nodiscard]] absl::StatusOr<std::unique_ptr<prometheus::Exposer>>
StartMetricsExposer(const std::string& address, const Metrics& metrics,
                    Store* store, ReplicatedStore* replicated,
                    std::shared_ptr<const PeerPlane> peer_plane,
                    const std::string& version, const std::string& git_sha,
                    const std::string& bearer_token = "");

// The token in `path` (surrounding whitespace dropped), for
// StartMetricsExposer; INVALID_ARGUMENT naming --metrics_token_file when the
// file cannot be read or holds no token.
[[nodiscard]] absl::StatusOr<std::string> ReadMetricsToken(
    const std::string& path);

}  // namespace dedup

#endif  // DEDUP_SERVER_METRICS_EXPOSER_H_
