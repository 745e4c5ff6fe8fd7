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
// The exposer reads `store` and `replicated`: destroy it before closing the
// store. UNAVAILABLE when the address cannot be bound.
[[nodiscard]] absl::StatusOr<std::unique_ptr<prometheus::Exposer>>
StartMetricsExposer(const std::string& address, const Metrics& metrics,
                    Store* store, ReplicatedStore* replicated,
                    std::shared_ptr<const PeerPlane> peer_plane,
                    const std::string& version, const std::string& git_sha);

}  // namespace dedup

#endif  // DEDUP_SERVER_METRICS_EXPOSER_H_
