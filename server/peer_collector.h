// dedup_peer_* metrics of the node-to-node Raft plane, read at scrape time
// from PeerPlane::metrics().
#ifndef DEDUP_SERVER_PEER_COLLECTOR_H_
#define DEDUP_SERVER_PEER_COLLECTOR_H_

#include <memory>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "replication/peer_plane.h"

namespace dedup {

// Keeps the plane alive. Thread-safe.
class PeerCollector : public prometheus::Collectable {
 public:
  explicit PeerCollector(std::shared_ptr<const PeerPlane> plane)
      : plane_(std::move(plane)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::shared_ptr<const PeerPlane> plane_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_PEER_COLLECTOR_H_
