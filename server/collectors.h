// Metrics computed at scrape time rather than counted as they happen.
#ifndef DEDUP_SERVER_COLLECTORS_H_
#define DEDUP_SERVER_COLLECTORS_H_

#include <string>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "storage/store.h"

namespace dedup {

// An empty family of scrape-time metrics, for the collectors to fill.
prometheus::MetricFamily NewFamily(std::string name, std::string help,
                                   prometheus::MetricType type);

// Exposes the store's gauges (records, leases, RocksDB sizes) and the
// compaction filter's drop counter, read from Store::Stats() at scrape time.
// Does not own `store`, which must outlive it.
class StoreCollector : public prometheus::Collectable {
 public:
  explicit StoreCollector(Store* store) : store_(store) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  Store* const store_;
};

// dedup_build_info and the standard process_* metrics (from /proc/self).
class ProcessCollector : public prometheus::Collectable {
 public:
  ProcessCollector(std::string version, std::string git_sha);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::string version_;
  const std::string git_sha_;
  const double start_time_seconds_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_COLLECTORS_H_
