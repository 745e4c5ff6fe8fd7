#include "server/session_metrics.h"

#include "server/metrics.h"

namespace dedup {
namespace {

constexpr std::array<const char*, kSessionOpKindCount> kKindNames = {
    "begin", "complete", "release", "renew", "checkpoint", "get", "unset"};

}  // namespace

SessionMetrics::SessionMetrics(prometheus::Registry* registry) {
  open_ = &prometheus::BuildGauge()
               .Name("dedup_session_streams_open")
               .Help("Dedup.Session streams open now")
               .Register(*registry)
               .Add({});
  auto& ops = prometheus::BuildCounter()
                  .Name("dedup_session_ops_total")
                  .Help(
                      "Dedup.Session operations answered, by kind and code "
                      "(per-operation errors are answers)")
                  .Register(*registry);
  for (int k = 0; k < kSessionOpKindCount; ++k) {
    for (int c = 0; c < 17; ++c) {
      ops_[k][c] =
          &ops.Add({{"kind", kKindNames[k]}, {"code", GrpcCodeName(c)}});
    }
  }
  auto& frames = prometheus::BuildCounter()
                     .Name("dedup_session_frames_total")
                     .Help("Dedup.Session frames received (in) and sent (out)")
                     .Register(*registry);
  frames_in_ = &frames.Add({{"direction", "in"}});
  frames_out_ = &frames.Add({{"direction", "out"}});
}

void SessionMetrics::RecordOp(SessionOpKind kind, int code) {
  if (code < 0 || code >= 17) code = 0;
  ops_[static_cast<int>(kind)][code]->Increment();
}

}  // namespace dedup
