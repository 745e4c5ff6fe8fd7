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

  const ClientOptions& options() const { return options_; }

 private:
  const ClientOptions options_;
  const std::unique_ptr<v1::Dedup::StubInterface> stub_;
};

}  // namespace dedup

#endif  // DEDUP_CLIENT_DEDUP_CLIENT_H_
