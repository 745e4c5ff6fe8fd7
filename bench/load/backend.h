// What the load loop needs from a system under test: the authority's calls,
// asynchronous, with answers in one vocabulary so the same workload state
// machines drive dedupd, Redis+Lua and PostgreSQL alike.
//
// Threading: every call takes `conn`, the connection (or gRPC channel) the
// calling slot is bound to. Callbacks may run on any thread the backend
// chooses, but never concurrently for the same slot (a slot has at most one
// call outstanding). RunAt is how a slot schedules its next operation, so the
// backend decides where it runs (Redis/PostgreSQL: on the connection's own
// thread, whose client library is not thread-safe).
#ifndef DEDUP_BENCH_LOAD_BACKEND_H_
#define DEDUP_BENCH_LOAD_BACKEND_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dedup::bench {

using Clock = std::chrono::steady_clock;

enum class BeginStatus { kStarted, kInUse, kConflict, kDuplicate };
enum class FencedStatus { kOk, kStaleFence, kNotFound, kAlreadyCompleted };

const char* Name(BeginStatus s);
const char* Name(FencedStatus s);

struct BeginCall {
  std::string key;  // the namespace is the backend's (fixed per run)
  std::string args_hash;
  std::string owner;
  uint32_t lease_ms = 30'000;
  uint32_t ttl_s = 3600;
  uint32_t wait_ms = 0;
};

struct CompleteCall {
  std::string key;
  uint64_t fence = 0;
  std::string result;
  uint32_t ttl_s = 3600;
};

// One answer, or `error` (transport or item error) non-empty.
template <typename T>
struct Answer {
  std::string error;
  T status{};
  uint64_t fence = 0;
};
using BeginAnswer = Answer<BeginStatus>;
using FencedAnswer = Answer<FencedStatus>;

template <typename T>
using Done = std::function<void(T)>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int connections() const = 0;
  // Starts the backend's threads and connects. Empty string on success.
  virtual std::string Start() = 0;
  // Stops threads after outstanding calls were answered or abandoned.
  virtual void Stop() = 0;

  // Runs `fn` at `when` (or as soon as possible after) in conn's context.
  virtual void RunAt(int conn, Clock::time_point when,
                     std::function<void()> fn) = 0;

  virtual void Begin(int conn, const BeginCall& call,
                     Done<BeginAnswer> done) = 0;
  virtual void Complete(int conn, const CompleteCall& call,
                        Done<FencedAnswer> done) = 0;
  virtual void Release(int conn, const std::string& key, uint64_t fence,
                       Done<FencedAnswer> done) = 0;
  // Atomic per item, not across items; answers in order. An empty vector
  // with `error` set means the whole call failed.
  virtual void BeginBatch(int conn, const std::vector<BeginCall>& calls,
                          Done<std::vector<BeginAnswer>> done) = 0;
  virtual void CompleteBatch(int conn, const std::vector<CompleteCall>& calls,
                             Done<std::vector<FencedAnswer>> done) = 0;
  // The do-nothing round trip of this system (bare gRPC Echo, Redis ECHO,
  // PostgreSQL SELECT $1), carrying `payload`. Empty string on success.
  virtual void Echo(int conn, const std::string& payload,
                    Done<std::string> done) = 0;
  // Plain claims without the protocol (Redis SET NX EX): `keys` pipelined in
  // one round trip. Answers how many were set, or an error. Backends without
  // such a primitive answer an error.
  virtual void SetNx(int conn, const std::vector<std::string>& keys,
                     uint32_t ttl_s, Done<std::string> done) = 0;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LOAD_BACKEND_H_
