// A small HTTP/1.1 server for the metrics port: one thread multiplexes every
// connection with epoll, so idle or slow clients cost a descriptor and a few
// bytes, never a thread, and a scrape is answered while hundreds of them are
// open. Connections are bounded (the longest-waiting one is closed to admit a
// new one) and timed out; requests are bounded in size and malformed ones
// answered with a precise status (400, 408, 414, 431, 505) and counted.
#ifndef DEDUP_SERVER_METRICS_HTTP_SERVER_H_
#define DEDUP_SERVER_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "server/metrics_http_request.h"

namespace dedup {

class MetricsHttpLoop;

struct HttpResponse {
  int status = 200;
  // Besides Content-Length and Connection, which the server adds.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool close = false;  // close the connection once answered
};

// Answers one complete request. Runs on the server's thread: it delays every
// other connection while it runs, so it must not block for long.
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct MetricsHttpOptions {
  // Open connections at most; a new one beyond it closes the connection that
  // has waited longest for (the rest of) a request.
  int max_connections = 256;
  // A connection that sends nothing for this long is closed.
  absl::Duration idle_timeout = absl::Seconds(60);
  // A request whose head is not complete this long after its first byte is
  // answered 408 and its connection closed (slow or stuck clients).
  absl::Duration request_timeout = absl::Seconds(5);
  // An answer the client has not read this long after it was ready is
  // abandoned and its connection closed.
  absl::Duration write_timeout = absl::Seconds(10);
  HttpLimits limits;
};

class MetricsHttpServer {
 public:
  // Listens on `address` ("host:port", "[v6]:port" or "port" for every
  // interface; port 0 picks a free one) and serves from a thread of its own.
  // Counts into `registry` (dedup_metrics_http_*), which must outlive the
  // server. UNAVAILABLE when the address cannot be bound.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address, HttpHandler handler,
      prometheus::Registry& registry, MetricsHttpOptions options = {});

  // Stops serving and closes every connection; returns once the thread has
  // ended (the handler is no longer running).
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The bound port.
  [[nodiscard]] int port() const { return port_; }

 private:
  MetricsHttpServer(int port, std::unique_ptr<MetricsHttpLoop> loop);

  const int port_;
  std::unique_ptr<MetricsHttpLoop> loop_;
  std::thread thread_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_METRICS_HTTP_SERVER_H_
