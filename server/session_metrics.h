// The metrics of Dedup.Session streams (session_reactor.h): streams open,
// operations answered by kind and code, frames each way. Bounded labels
// (6 kinds plus "unset", 17 codes, 2 directions), all pre-created.
#ifndef DEDUP_SERVER_SESSION_METRICS_H_
#define DEDUP_SERVER_SESSION_METRICS_H_

#include <array>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace dedup {

// What a SessionOp asks for (its oneof), as counted.
enum class SessionOpKind {
  kBegin,
  kComplete,
  kRelease,
  kRenew,
  kCheckpoint,
  kGet,
  kUnset
};
inline constexpr int kSessionOpKindCount = 7;

// Thread-safe: every method may be called from any thread (a lookup in a
// fixed table plus an atomic add).
class SessionMetrics {
 public:
  // Registers the families in `registry` (not owned; must outlive this).
  explicit SessionMetrics(prometheus::Registry* registry);

  void StreamOpened() { open_->Increment(); }
  void StreamClosed() { open_->Decrement(); }
  // One answer of kind `kind` with gRPC code `code` (0..16; others "OK").
  void RecordOp(SessionOpKind kind, int code);
  void RecordFrameIn() { frames_in_->Increment(); }
  void RecordFrameOut() { frames_out_->Increment(); }

 private:
  prometheus::Gauge* open_;
  std::array<std::array<prometheus::Counter*, 17>, kSessionOpKindCount> ops_;
  prometheus::Counter* frames_in_;
  prometheus::Counter* frames_out_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_SESSION_METRICS_H_
