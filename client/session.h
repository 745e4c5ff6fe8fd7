// A Dedup.Session stream to one server (proto/dedup/v1/dedup.proto, rpc
// Session): operations submitted from any thread go out in frames on one
// bidirectional stream, and each one's answer is delivered as soon as it
// arrives, matched by id.
//
// Self-clocking: at most one frame is being written at a time; operations
// submitted while a frame is in flight wait and all go in the next frame
// (up to kMaxFrameOps), so frames grow with the load without any timer. The
// operations sent and not yet answered never exceed the max_in_flight the
// server announces in its first frame; nothing is written before it.
//
// A stream that ends (transport failure, server stopping, protocol error)
// fails every operation not yet answered, sent or still queued, with the
// stream's status: like a unary call that failed in transport, its outcome
// is unknown, so the caller retries it the safe way (Begin with the same
// owner, Complete with the same fence), with its own backoff. The next
// Submit opens a new stream. A server without Session fails the operations
// with UNIMPLEMENTED, or (dedupd builds from before it) INVALID_ARGUMENT
// "request: cannot be parsed ..." (IsUnparsedRequestReply).
//
// A stuck server (stopped, or its host gone without a reset) answers
// nothing and the stream would wait for ever: a watchdog looks at every
// session four times a second, and when an operation (sent or queued) is
// still unanswered kStallGrace past its deadline (SessionOp.timeout_ms from
// Submit; the server answers every operation by then), it cancels the
// stream. Its operations then fail UNAVAILABLE "session: ... stream reset",
// as a broken stream's do.
//
// Thread-safe. `done` callbacks run on gRPC's threads (or the submitter's
// when it fails at once), outside the session's lock: they may Submit again
// but must not block nor destroy the session. The destructor cancels the
// stream and waits until its callbacks have run; callers destroy it only
// once every `done` was called or they accept CANCELLED answers.
#ifndef DEDUP_CLIENT_SESSION_H_
#define DEDUP_CLIENT_SESSION_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dedup/v1/dedup.grpc.pb.h"

namespace dedup {

class SessionCall;

class Session {
 public:
  // The server refuses frames of more operations (--max_batch_items).
  static constexpr int kMaxFrameOps = 1000;
  // How long past an operation's deadline the stream may leave it
  // unanswered before the watchdog resets the stream: room for a server
  // short of CPU, whose deadline answers come late.
  static constexpr absl::Duration kStallGrace = absl::Seconds(2);

  // The operation's answer, or the status of the stream that ended before
  // it was answered.
  using Done = std::function<void(absl::StatusOr<v1::SessionAnswer>)>;

  // `stub` outlives the session.
  explicit Session(v1::Dedup::Stub& stub);
  ~Session();

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Queues `op` (its id is the session's to set) and writes it now if no
  // frame is in flight and max_in_flight allows. `done` is called once.
  void Submit(v1::SessionOp op, Done done);

  // Streams opened so far (for tests and metrics).
  [[nodiscard]] int streams_opened() const;

  // The watchdog's look at `now`: cancels the current stream when an
  // operation is unanswered kStallGrace past its deadline.
  void CheckStalled(absl::Time now);

 private:
  friend class SessionCall;
  struct Queued {
    v1::SessionOp op;
    Done done;
    absl::Time deadline;  // Submit's time + op.timeout_ms (infinite: none)
  };
  struct Sent {
    Done done;
    absl::Time deadline;
  };

  using Ready = std::vector<std::pair<Done, v1::SessionAnswer>>;

  // Moves the operations that may go now into the current call's outgoing
  // frame; returns the call to StartWrite it on, or nullptr.
  SessionCall* FillFrameLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reactions of the current call. A frame's answers are taken out under
  // the lock and delivered by the call after it started its next read.
  [[nodiscard]] Ready TakeAnswers(v1::SessionResponse& frame);
  // True when the call may now RemoveHold (its reads ended, no write out).
  [[nodiscard]] bool OnWriteDone(bool ok);
  [[nodiscard]] bool OnReadsEnded();
  void OnCallDone(SessionCall* call, const absl::Status& status);

  v1::Dedup::Stub& stub_;
  mutable absl::Mutex mu_;
  SessionCall* call_ ABSL_GUARDED_BY(mu_) = nullptr;  // current stream
  int streams_opened_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // 0 until the current stream's first frame.
  uint32_t max_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_ended_ ABSL_GUARDED_BY(mu_) = false;
  // The current stream was cancelled by the watchdog.
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Queued> queued_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Sent> in_flight_ ABSL_GUARDED_BY(mu_);

  // Calls whose OnDone has not finished; the destructor waits for 0. A
  // std::mutex: the waiter may destroy it right after the last unlock.
  std::mutex live_mu_;
  std::condition_variable live_zero_;
  int live_calls_ = 0;  // guarded by live_mu_
};

}  // namespace dedup

#endif  // DEDUP_CLIENT_SESSION_H_
