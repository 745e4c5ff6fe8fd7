// The event loop behind MetricsHttpServer: every connection of the metrics
// port, their timeouts and their answers, on one thread.
#ifndef DEDUP_SERVER_METRICS_HTTP_LOOP_H_
#define DEDUP_SERVER_METRICS_HTTP_LOOP_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "server/metrics_http_server.h"

namespace dedup {

class MetricsHttpLoop {
 public:
  // Takes `listen_fd` (non-blocking, listening; closed even on failure).
  // Counts into `registry`, which must outlive the loop.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MetricsHttpLoop>> Create(
      int listen_fd, HttpHandler handler, prometheus::Registry& registry,
      MetricsHttpOptions options);
  // Closes every descriptor. Run must have returned (or never started).
  ~MetricsHttpLoop();

  // Serves until Stop. Call from one thread only.
  void Run();
  // Makes Run return soon. Any thread.
  void Stop();

 private:
  using Clock = std::chrono::steady_clock;
  enum class State {
    kIdle,       // waiting for the first byte of a request
    kReading,    // part of a request's head has arrived
    kWriting,    // an answer is waiting for the client to read it
    kLingering,  // answered and closing: input is read and dropped until EOF
    kClosed,     // descriptor closed; freed once the current event is done
  };
  struct Conn {
    int fd = -1;
    State state = State::kIdle;
    Clock::time_point since;  // when `state` began
    std::string in;           // received, not yet parsed
    std::string out;          // answer not yet sent, from out_pos
    size_t out_pos = 0;
    bool close_after = false;  // close once `out` is sent
    bool peer_closed = false;  // the client sent EOF
  };
  struct Counters {
    prometheus::Family<prometheus::Counter>* requests;
    std::map<int, prometheus::Counter*> by_code;
    prometheus::Counter* idle_timeout;
    prometheus::Counter* request_timeout;
    prometheus::Counter* write_timeout;
    prometheus::Counter* evicted;
    prometheus::Counter* refused;
    prometheus::Gauge* open;
  };

  MetricsHttpLoop(int listen_fd, int epoll_fd, int stop_fd, HttpHandler handler,
                  Counters counters, MetricsHttpOptions options);
  static Counters MakeCounters(prometheus::Registry& registry);

  void AcceptAll();
  void PauseAccepting();
  bool EvictOne();
  void OnEvent(int fd, uint32_t events);
  // Close() leaves `c` readable (state kClosed) until Run's next round, so
  // the members below may use a Conn after calling what may close it.
  // Reads what has arrived; false when the connection was closed.
  bool Read(Conn& c);
  // Answers every complete request buffered in `c` (may close it).
  void Process(Conn& c);
  void Answer(Conn& c, HttpResponse response, bool head_only);
  void AnswerError(Conn& c, int status, const std::string& reason);
  void Flush(Conn& c);
  void Linger(Conn& c);
  void Watch(const Conn& c, uint32_t events);
  void Close(int fd, prometheus::Counter* reason);
  void Sweep();
  void Count(int status);

  const int listen_fd_;
  const int epoll_fd_;
  const int stop_fd_;
  const HttpHandler handler_;
  Counters counters_;
  const MetricsHttpOptions options_;
  // Only the loop's thread touches these.
  absl::flat_hash_map<int, std::unique_ptr<Conn>> conns_;
  std::vector<std::unique_ptr<Conn>> closed_;
  Clock::time_point now_;
  Clock::time_point accept_paused_until_;
  bool accept_paused_ = false;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_METRICS_HTTP_LOOP_H_
