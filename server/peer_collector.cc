#include "server/peer_collector.h"

#include <string>
#include <utility>

#include "server/collectors.h"

namespace dedup {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

void AddLabelled(MetricFamily& family, const char* label, const char* value,
                 double count) {
  ClientMetric metric;
  metric.label.push_back({label, value});
  metric.counter.value = count;
  family.metric.push_back(std::move(metric));
}

}  // namespace

std::vector<MetricFamily> PeerCollector::Collect() const {
  const PeerMetrics& m = plane_->metrics();
  std::vector<MetricFamily> out;
  MetricFamily handshakes =
      NewFamily("dedup_peer_handshakes_total",
                "Inbound Raft peer connections by how their TLS handshake and "
                "hello ended",
                MetricType::Counter);
  for (int i = 0; i < kHandshakeResults; ++i) {
    AddLabelled(handshakes, "result",
                HandshakeResultName(static_cast<HandshakeResult>(i)),
                static_cast<double>(m.handshakes[i].load()));
  }
  out.push_back(std::move(handshakes));
  MetricFamily rejected = NewFamily(
      "dedup_peer_frames_rejected_total",
      "Raft messages from authenticated peers refused before libraft read "
      "them (the connection is closed)",
      MetricType::Counter);
  for (int i = 0; i < kFrameRejects; ++i) {
    AddLabelled(rejected, "reason",
                FrameRejectName(static_cast<FrameReject>(i)),
                static_cast<double>(m.frames_rejected[i].load()));
  }
  out.push_back(std::move(rejected));
  MetricFamily connections =
      NewFamily("dedup_peer_connections",
                "Raft peer connections open now (inbound and outbound)",
                MetricType::Gauge);
  ClientMetric metric;
  metric.gauge.value = static_cast<double>(m.connections.load());
  connections.metric.push_back(std::move(metric));
  out.push_back(std::move(connections));
  return out;
}

}  // namespace dedup
