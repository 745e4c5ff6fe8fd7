// dedupd's Prometheus metrics. Names follow Prometheus practice: `dedup_`
// prefix, base units, `_total` counters, bounded label sets (never a key,
// owner or client id; namespaces only from an operator-given list).
//
// Thread-safe: every Record* method may be called from any thread; the
// counters are pre-created so recording is a lookup in a fixed table plus an
// atomic add.
#ifndef DEDUP_SERVER_METRICS_H_
#define DEDUP_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/limits.h"
#include "server/session_metrics.h"
#include "storage/store.h"

namespace dedup {

// The name of gRPC status code `code` ("UNAVAILABLE"), as metric labels
// spell it; null outside 0..16. Thread-safe.
[[nodiscard]] const char* GrpcCodeName(int code);

enum class Method {
  kBegin,
  kComplete,
  kRelease,
  kRenew,
  kGet,
  kForget,
  kBeginBatch,
  kCompleteBatch,
  kCheckpoint,
  kCheckpointBatch,
  // dedup.v1.Admin and dedup.v1.Cluster, labelled "Admin.Stats" etc.
  kAdminStats,
  kAdminCompact,
  kAdminReloadPolicy,
  kAdminGetPolicy,
  kClusterStatus,
  kClusterDigest,
  kClusterAddNode,
  kClusterRemoveNode,
  kClusterTransferLeadership,
  kClusterFetchCheckpoint,
  kAdminBackup,
  kClusterShardMap,
  kClusterHostGroup,
  kClusterDropGroup,
  kClusterMoveReplica,
  kClusterSetGroupReplicas
};
inline constexpr int kMethodCount = 26;
[[nodiscard]] const char* MethodName(Method method);

// How a Begin was answered, as counted.
enum class BeginOutcome {
  kStarted,
  kTakeover,
  kReentry,
  kInUse,
  kConflict,
  kDuplicate,
  kExpired,  // a tombstone: done long ago, not run again
  kRerun     // a tombstone, run again (accept_rerun)
};
inline constexpr int kBeginOutcomeCount = 8;
[[nodiscard]] BeginOutcome ClassifyBegin(const BeginDecision& decision);
[[nodiscard]] const char* BeginOutcomeName(BeginOutcome outcome);

class Metrics : public StoreObserver {
 public:
  // `labelled_namespaces` get their own `dedup_namespace` label value; every
  // other namespace is counted as "other". Not `namespace`: Kubernetes
  // service discovery gives every target that label, which would rename ours
  // to `exported_namespace`.
  explicit Metrics(const std::vector<std::string>& labelled_namespaces);

  // The registry to expose (holds every metric below).
  [[nodiscard]] std::shared_ptr<prometheus::Registry> registry() const {
    return registry_;
  }

  void RecordBegin(absl::string_view ns, const BeginResult& result);
  void RecordFenced(Method method, FencedStatus status);
  // `field` is the request field named by the validation error.
  void RecordInvalid(Method method, absl::string_view field);
  void RecordError(Method method, grpc::StatusCode code);
  // Duration of a call that answered at once.
  void ObserveDuration(Method method, double seconds);
  // Duration of a Begin that was parked by its wait_ms.
  void ObserveWait(double seconds);
  void RecordEventLogDropped();
  // A BeginBatch item answered UNAVAILABLE because the answer's results
  // passed --max_batch_response_bytes.
  void RecordBatchResultsCapped() { batch_results_capped_->Increment(); }
  // StoreObserver.
  void OnWrite(int operations, double seconds) override;

  // Calls of every service between their start and their answer
  // (RpcCall; a checkpoint stream until its end), for the shutdown drain.
  void CallStarted() { calls_in_flight_.fetch_add(1); }
  void CallFinished() { calls_in_flight_.fetch_sub(1); }
  [[nodiscard]] int64_t calls_in_flight() const {
    return calls_in_flight_.load();
  }

  // The Dedup.Session metrics, registered in registry().
  [[nodiscard]] SessionMetrics* session() { return session_.get(); }

  // Current value of dedup_begin_total{outcome}, for the admin Stats call.
  [[nodiscard]] double BeginCount(BeginOutcome outcome) const;

 private:
  using OutcomeCounters = std::array<prometheus::Counter*, kBeginOutcomeCount>;
  OutcomeCounters AddOutcomes(prometheus::Family<prometheus::Counter>& family,
                              const std::string& ns);

  std::shared_ptr<prometheus::Registry> registry_;
  std::atomic<int64_t> calls_in_flight_{0};
  OutcomeCounters begin_;
  // Read-only after construction, hence lock-free lookups.
  absl::flat_hash_map<std::string, OutcomeCounters> begin_by_namespace_;
  OutcomeCounters begin_other_namespace_;
  std::array<prometheus::Counter*, 4>
      wait_;  // duplicate/started/timeout/conflict
  // [method][FencedStatus] for Complete, Release, Renew.
  std::array<std::array<prometheus::Counter*, 4>, 4> fenced_;
  std::array<prometheus::Histogram*, kMethodCount> duration_;
  prometheus::Family<prometheus::Counter>* invalid_;
  prometheus::Family<prometheus::Counter>* errors_;
  prometheus::Histogram* wait_duration_;
  prometheus::Histogram* write_seconds_;
  prometheus::Histogram* writes_per_sync_;
  prometheus::Counter* event_log_dropped_;
  prometheus::Counter* batch_results_capped_;
  std::unique_ptr<SessionMetrics> session_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_METRICS_H_
