// One Dedup.Session stream (see the comment on `rpc Session` in
// proto/dedup/v1/dedup.proto, the contract): reads frames of operations,
// hands each frame's operations to the store together (one shard pass /
// group commit / Raft entry where they fit, as a batch), and writes each
// answer as soon as it is ready, every answer ready meanwhile in one frame.
//
// Never blocks: reactions and store callbacks only take the reactor's
// mutex, briefly. One write is outstanding at a time; answers that come in
// meanwhile wait in the next frame. The stream is finished only once every
// operation handed to the store has called back (its answer written or
// dropped), so callbacks never outlive the reactor.
#ifndef DEDUP_SERVER_SESSION_REACTOR_H_
#define DEDUP_SERVER_SESSION_REACTOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <queue>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/alarm.h"
#include "grpcpp/support/server_callback.h"
#include "server/auth.h"
#include "server/namespace_policy.h"
#include "server/session_metrics.h"
#include "storage/store.h"

namespace dedup {

class DedupService;

// The kind of `op`, for metrics.
SessionOpKind KindOf(const v1::SessionOp& op);

// Deletes itself in OnDone. Thread-safe: reactions, store callbacks, the
// timeout alarm and Stop may run concurrently on any threads.
class SessionReactor final
    : public grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse> {
 public:
  // `service` must outlive the stream. Authenticates the stream (refused:
  // finished at once with the refusal) or sends the first frame
  // (max_in_flight) and starts reading.
  SessionReactor(const DedupService* service,
                 grpc::CallbackServerContext* context);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

  // Lame duck: reads no more frames; ends the stream UNAVAILABLE once what
  // is in flight is answered. Any thread, any number of times.
  void Stop();

  // A received frame while its operations are in flight. Shared by their
  // store callbacks.
  struct Frame {
    v1::SessionRequest request;
    std::chrono::steady_clock::time_point received;
    // Per operation: answered (by the store or the timeout), so exactly one
    // answer leaves for it.
    std::unique_ptr<std::atomic<bool>[]> answered;
    std::optional<ResultBudget> budget;
    // The tenant's in-flight slot for the frame's operations.
    std::shared_ptr<void> admitted;
  };

 private:
  struct Deadline {
    std::chrono::steady_clock::time_point at;
    // Weak: a frame whose operations were all answered by the store is not
    // kept (nor its tenant slot) until its deadlines pass.
    std::weak_ptr<Frame> frame;
    int index;
    bool operator>(const Deadline& other) const { return at > other.at; }
  };
  // What to do once the mutex is released: gRPC calls (StartWrite, Finish,
  // Alarm::Cancel, ...) may run a reaction inline, which takes the mutex.
  struct Actions {
    bool write = false;  // out_
    bool read = false;   // in_
    std::optional<grpc::Status> finish;
    std::shared_ptr<grpc::Alarm> cancel_alarm;
    std::shared_ptr<grpc::Alarm> arm;
    std::chrono::steady_clock::time_point arm_at;
  };
  void Run(const Actions& actions);

  // Protocol checks of `frame`, then its ids become in flight. Returns
  // false (the stream ending with the error) when it is refused.
  bool Admit(const Frame& frame) ABSL_LOCKS_EXCLUDED(mu_);
  // Every operation of `frame` checked and handed to the store
  // (session_submit.cc).
  void Submit(const std::shared_ptr<Frame>& frame);
  // Hands the operations that passed their checks to the store: Begins and
  // Completes each in one call, the others back to back.
  void SubmitToStore(const std::shared_ptr<Frame>& frame,
                     const std::vector<bool>& to_store,
                     const std::vector<EffectivePolicy>& policies);
  // Hands operation `i` to the store alone (a waiting Begin, Release,
  // Renew, Checkpoint, Get; nothing for the others).
  void SubmitOne(const std::shared_ptr<Frame>& frame, int i,
                 const EffectivePolicy& policy);
  // The store callbacks answering operation `i` of `frame`.
  StoreCallback<BeginResult> BeginDone(const std::shared_ptr<Frame>& frame,
                                       int i);
  StoreCallback<FencedDecision> FencedDone(const std::shared_ptr<Frame>& frame,
                                           int i);
  StoreCallback<std::optional<Record>> GetDone(
      const std::shared_ptr<Frame>& frame, int i);
  // Answers operation `index` of `frame` with `error` at once.
  void Refuse(const std::shared_ptr<Frame>& frame, int index,
              const absl::Status& error);
  // The store's (or a refusal's) answer of operation `index`: written
  // unless the operation's timeout answered it already.
  void Answer(const std::shared_ptr<Frame>& frame, int index,
              v1::SessionAnswer answer) ABSL_LOCKS_EXCLUDED(mu_);
  // Counts and queues `answer` (its id set).
  void QueueLocked(SessionOpKind kind, v1::SessionAnswer answer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts writing what is queued when that is allowed now.
  void MaybeWriteLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finishes the stream when nothing is left to do.
  void MaybeFinishLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads no more; the stream ends with `status` unless an earlier end
  // chose one.
  void EndLocked(grpc::Status status, Actions* actions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Timeouts (session_deadlines.cc): remembers `frame`'s operations with a
  // timeout_ms; the alarm answers them DEADLINE_EXCEEDED when due.
  void WatchDeadlines(const std::shared_ptr<Frame>& frame)
      ABSL_LOCKS_EXCLUDED(mu_);
  void ArmLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the earliest deadlines whose operations were answered, and
  // answers DEADLINE_EXCEEDED those due by `now`.
  void ExpireLocked(std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnAlarm() ABSL_LOCKS_EXCLUDED(mu_);

  const DedupService* const service_;
  grpc::CallbackServerContext* const context_;
  SessionMetrics* const metrics_;
  const uint32_t max_in_flight_;
  Caller caller_;
  v1::SessionRequest in_;  // only the reading side touches it

  absl::Mutex mu_;
  absl::flat_hash_set<uint64_t> in_flight_ ABSL_GUARDED_BY(mu_);
  // Operations handed out whose store callback has not run yet.
  int64_t store_pending_ ABSL_GUARDED_BY(mu_) = 0;
  // True while a frame is being submitted: its inline answers share a write.
  bool submitting_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool reading_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status end_ ABSL_GUARDED_BY(mu_);
  v1::SessionResponse queued_ ABSL_GUARDED_BY(mu_);
  v1::SessionResponse out_;  // the frame being written (writing_)
  std::priority_queue<Deadline, std::vector<Deadline>, std::greater<Deadline>>
      deadlines_ ABSL_GUARDED_BY(mu_);
  bool alarm_armed_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point alarm_at_ ABSL_GUARDED_BY(mu_);
  // Shared with Actions, which use it after the mutex is released.
  std::shared_ptr<grpc::Alarm> alarm_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup

#endif  // DEDUP_SERVER_SESSION_REACTOR_H_
