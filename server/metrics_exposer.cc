#include "server/metrics_exposer.h"

#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/cluster_collector.h"
#include "server/collectors.h"
#include "server/peer_collector.h"

namespace dedup {

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsExposer(
    const std::string& address, const Metrics& metrics, Store* store,
    ReplicatedStore* replicated, std::shared_ptr<const PeerPlane> peer_plane,
    const std::string& version, const std::string& git_sha) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // Several workers and a short read timeout: an idle connection holds one
    // worker for a few seconds, not every scrape for civetweb's default 30 s.
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", address, "num_threads", "8", "request_timeout_ms",
        "3000", "keep_alive_timeout_ms", "3000"});
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
