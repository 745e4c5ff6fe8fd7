// Typed, retrying client for the dedup.v1.Dedup service.
//
// Thread-safe: one Client may be shared by any number of threads (it holds no
// mutable state beyond the gRPC stub, which is itself thread-safe). Every call
// blocks the calling thread until it has an answer or gives up.
#ifndef DEDUP_CLIENT_DEDUP_CLIENT_H_
#define DEDUP_CLIENT_DEDUP_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/backoff.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/channel.h"

namespace dedup {

struct ClientOptions {
  // Deadline of each attempt. Begin adds its wait_ms on top, since the server
  // may legitimately hold the call that long.
  absl::Duration deadline = absl::Seconds(5);
  // Attempts per call, counting the first. Only UNAVAILABLE is retried: it is
  // the one code the server uses for "nothing happened, try again".
  int max_attempts = 5;
  // Delay before retry n is uniform(0, min(cap, base * 2^n)).
  BackoffOptions backoff;
};

struct BeginOptions {
  // Attempt id (a UUID). Retries of this Begin reuse it, so a Begin whose
  // answer was lost is re-entered rather than seen as IN_USE. Empty means
  // anonymous (never re-entrant).
  std::string owner;
  uint32_t lease_ms = 0;  // 0: server default.
  uint32_t ttl_s = 0;     // 0: server default.
  uint32_t wait_ms = 0;   // 0: answer IN_USE at once.
};

// One item of a BeginBatch: a Begin as in Client::Begin, without wait_ms (a
// batch never waits, so one busy key cannot hold the others).
struct BeginBatchItem {
  std::string ns;
  std::string key;
  std::string args_hash;
  // As BeginOptions::owner. Give each item its own attempt id: a retried
  // batch re-sends it unchanged, so an item the lost attempt had already
  // claimed is re-entered (STARTED, same fence) instead of answering IN_USE.
  // An empty owner is anonymous and such an item would then answer IN_USE.
  std::string owner;
  uint32_t lease_ms = 0;  // 0: server default.
  uint32_t ttl_s = 0;     // 0: server default.
};

// One item of a CompleteBatch, as the arguments of Client::Complete.
struct CompleteBatchItem {
  std::string ns;
  std::string key;
  uint64_t fence = 0;
  v1::Outcome outcome = v1::OUTCOME_UNSPECIFIED;
  std::string result;
  uint32_t ttl_s = 0;  // 0: keep the TTL given at Begin.
};

// One answer per item, in the items' order: the server's answer, or the
// error that refused that item alone (its code and "items[i].<field>: ..."
// message); nothing was done for a refused item.
using BeginBatchResults = std::vector<absl::StatusOr<v1::BeginResponse>>;
using CompleteBatchResults = std::vector<absl::StatusOr<v1::CompleteResponse>>;

// Every method returns the server's answer (which may be any of the answer
// statuses, e.g. IN_USE or STALE_FENCE: those are OK responses, not errors),
// or the gRPC error mapped to absl::Status with the same code and message.
class Client {
 public:
  // Connects lazily to `target` (e.g. "127.0.0.1:50051") without TLS.
  explicit Client(const std::string& target, ClientOptions options = {});
  // Uses an existing channel (any credentials); the channel is shared.
  explicit Client(std::shared_ptr<grpc::Channel> channel,
                  ClientOptions options = {});
  ~Client();

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  [[nodiscard]] absl::StatusOr<v1::BeginResponse> Begin(
      absl::string_view ns, absl::string_view key, absl::string_view args_hash,
      const BeginOptions& options = {}) const;

  // `ttl_s` 0 keeps the TTL given at Begin.
  [[nodiscard]] absl::StatusOr<v1::CompleteResponse> Complete(
      absl::string_view ns, absl::string_view key, uint64_t fence,
      v1::Outcome outcome, absl::string_view result, uint32_t ttl_s = 0) const;

  [[nodiscard]] absl::StatusOr<v1::ReleaseResponse> Release(
      absl::string_view ns, absl::string_view key, uint64_t fence) const;

  // `lease_ms` 0 means the server default.
  [[nodiscard]] absl::StatusOr<v1::RenewResponse> Renew(
      absl::string_view ns, absl::string_view key, uint64_t fence,
      uint32_t lease_ms = 0) const;

  [[nodiscard]] absl::StatusOr<v1::GetResponse> Get(
      absl::string_view ns, absl::string_view key) const;

  [[nodiscard]] absl::StatusOr<v1::ForgetResponse> Forget(
      absl::string_view ns, absl::string_view key) const;

  // Up to the server's batch limit (1000 by default) independent Begins in
  // one call. The call itself fails (e.g. INVALID_ARGUMENT "items: ...") only
  // when the batch as a whole is refused (empty or too large) or the RPC
  // fails; then nothing was done for any item. Same deadline and retry policy
  // as Begin: a retry (on UNAVAILABLE) re-sends every item with its owner.
  [[nodiscard]] absl::StatusOr<BeginBatchResults> BeginBatch(
      const std::vector<BeginBatchItem>& items) const;

  // Up to the server's batch limit independent Completes in one call,
  // answered like BeginBatch. Retrying is safe: Complete is idempotent.
  [[nodiscard]] absl::StatusOr<CompleteBatchResults> CompleteBatch(
      const std::vector<CompleteBatchItem>& items) const;

  const ClientOptions& options() const { return options_; }

 private:
  const ClientOptions options_;
  const std::unique_ptr<v1::Dedup::StubInterface> stub_;
};

}  // namespace dedup

#endif  // DEDUP_CLIENT_DEDUP_CLIENT_H_
