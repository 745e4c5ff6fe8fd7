// Structured event lines for the calls operators investigate: duplicates,
// takeovers, stale-fence rejections and conflicts. One JSON object per line,
// e.g.
//   {"ts":"2026-11-22T03:10:00.123Z","event":"duplicate","namespace":"billing",
//    "key_hash":"9f86d081884c7d65","fence":12,"attempts":1,"age_ms":5400,...}
// Keys are logged as the first 16 hex digits of HMAC-SHA256(secret, key)
// unless raw keys are allowed: keys often embed customer data, and a plain
// hash of a guessable key ("order-42") is reversed by trying candidates. The
// secret comes from --event_log_key_file, by default a random one made at
// the first start in the data directory.
//
// Thread-safe. Lines are queued and written by a background thread so a slow
// sink never stalls a storage thread; when the queue is full, lines are
// dropped and counted.
#ifndef DEDUP_SERVER_EVENT_LOG_H_
#define DEDUP_SERVER_EVENT_LOG_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/metrics.h"
#include "storage/store.h"

namespace dedup {

struct EventLogOptions {
  // "stdout", "stderr", "off", or a file path (appended to). stdout by
  // default: events are data for a pipeline, apart from the process log on
  // stderr (common/log.h), and a container runtime or journald collects
  // stdout without configuration.
  std::string destination = "stdout";
  // Fraction of events written, 0..1 (deterministic: exactly every 1/rate-th).
  double sample_rate = 1.0;
  bool raw_keys = false;
  size_t max_queued_lines = 10'000;
  // The HMAC key of key_hash (LoadOrCreateEventLogSecret).
  std::string key_hash_secret;
  // Where the secret is; empty: <data_dir>/event-log.key.
  std::string key_file;
};

// The secret in `path`, made (32 random bytes, mode 0600) when the file does
// not exist. Share one file between the nodes of a group (or between
// restarts of a node with a new data dir) to keep hashes comparable.
// INVALID_ARGUMENT naming the file when it is unreadable or shorter than 16
// bytes.
[[nodiscard]] absl::StatusOr<std::string> LoadOrCreateEventLogSecret(
    const std::string& path);

class EventLog {
 public:
  // nullptr (and OK) when the destination is "off". `metrics` (not owned,
  // may be null) counts dropped lines; it must outlive the log.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EventLog>> Open(
      const EventLogOptions& options, Metrics* metrics);
  // Writes every queued line, then closes the sink.
  ~EventLog();

  // Logs DUPLICATE, takeover and CONFLICT answers; ignores the rest.
  void OnBegin(absl::string_view ns, absl::string_view key,
               const BeginResult& result, int64_t now_ms);
  // Logs a STALE_FENCE answer to Complete, Release or Renew.
  void OnFenced(Method method, absl::string_view ns, absl::string_view key,
                uint64_t given_fence, const FencedDecision& decision,
                int64_t now_ms);

 private:
  EventLog(const EventLogOptions& options, std::FILE* sink, bool owns_sink,
           Metrics* metrics);

  // The line's prefix up to and including the key field.
  std::string Start(absl::string_view event, absl::string_view ns,
                    absl::string_view key, int64_t now_ms) const;
  bool Sampled();
  void Enqueue(std::string line);
  void WriteLoop();

  const EventLogOptions options_;
  std::FILE* const sink_;
  const bool owns_sink_;
  Metrics* const metrics_;
  std::atomic<uint64_t> seen_{0};

  absl::Mutex mu_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_EVENT_LOG_H_
