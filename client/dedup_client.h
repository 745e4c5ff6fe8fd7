// Typed, retrying client for the dedup.v1.Dedup service, for a single dedupd
// or a replicated group (cluster mode) where only the leader answers.
//
// Sharded clusters (smart routing, client/shard_router.h): before its first
// call the client asks the configured nodes for Cluster.ShardMap (a single
// node answers UNIMPLEMENTED: nothing changes) and then sends each call to
// the leader of its key's group; a batch is split per group (sent in
// parallel, answers merged back in the items' order; no atomicity across
// groups). Everything below then holds per group.
//
// Leader following: a follower answers UNAVAILABLE naming the leader in the
// trailer "dedup-leader"; the client sends the call there at once (the
// address need not be one it was given) and keeps sending later calls there.
// UNAVAILABLE without a leader named (an election, a stopped node) or a
// connection failure moves on to the next configured address after a
// backoff. See RetryingCall (client/retrying_call.h) for the exact rules.
//
// Unknown outcomes: a leader that loses leadership after proposing an
// operation answers ABORTED with "dedup-outcome: unknown" (a batch item:
// ItemError code ABORTED). The client retries such calls the safe way (Begin
// with the same owner, Complete with the same fence, outcome and result,
// Renew, Get and Forget as they are, Release reporting a claim its retry no
// longer finds as released). When retries do not settle it, the call returns
// ABORTED for which IsOutcomeUnknown() is true: the operation may have taken
// effect, so it must never be treated as "nothing happened".
//
// Thread-safe: one Client may be shared by any number of threads; the current
// leader is shared state behind a mutex. Every call blocks the calling thread
// until it has an answer or gives up.
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
#include "client/leader_router.h"
#include "client/outcome_unknown.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/channel.h"

namespace dedup {

class ShardRouter;

struct ClientOptions {
  // Deadline of each attempt, leader redirects within it included. Begin
  // adds its wait_ms on top, since the server may legitimately hold the call
  // that long.
  absl::Duration deadline = absl::Seconds(5);
  // Attempts per call, counting the first. Retried: UNAVAILABLE (the code
  // the server uses for "nothing happened, try again") and ABORTED with
  // "dedup-outcome: unknown" (see above). Redirects to a named leader are
  // not attempts. 0: 5 for one address (or a channel), 10 for several (a
  // group: the retries then outlast a leader election, about 1-2 s, with
  // room to spare); options() reports the number in use.
  int max_attempts = 0;
  // Delay before retry n is uniform(0, min(cap, base * 2^n)).
  BackoffOptions backoff;
  // Redirects to a leader named in "dedup-leader" per attempt; beyond that
  // the redirect counts as an UNAVAILABLE attempt. Bounds a loop of stale
  // hints during a leadership change.
  int max_leader_hops = 3;
  // Opens the channel to a leader the client learns of (and, for the address
  // constructors, to every address). Empty: insecure channels. Set it when
  // the channel constructor is used with credentials. For TLS, mTLS and a
  // bearer token: SecureChannelFactory (common/channel_security.h). The
  // channels of both reconnect on a short backoff (up to 1 s apart, see
  // common/reconnect_backoff.h); a factory of your own may call
  // SetReconnectBackoff for the same.
  ChannelFactory channel_factory;
};

struct BeginOptions {
  // Attempt id (a UUID). Retries of this Begin reuse it, so a Begin whose
  // answer was lost is re-entered rather than seen as IN_USE. Empty means
  // anonymous (never re-entrant).
  std::string owner;
  uint32_t lease_ms = 0;  // 0: server default.
  uint32_t ttl_s = 0;     // 0: server default.
  uint32_t wait_ms = 0;   // 0: answer IN_USE at once.
  // On a tombstone (the operation completed and its record expired): true
  // starts it again instead of answering EXPIRED (BeginRequest.accept_rerun).
  bool accept_rerun = false;
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
  uint32_t lease_ms = 0;      // 0: server default.
  uint32_t ttl_s = 0;         // 0: server default.
  bool accept_rerun = false;  // As BeginOptions::accept_rerun.
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

// One item of a CheckpointBatch (CoalescingClient::Checkpoint), as the
// arguments of Client::Checkpoint. Re-sending it unchanged is safe: the same
// checkpoint again changes nothing a reader can see but its time.
struct CheckpointBatchItem {
  std::string ns;
  std::string key;
  uint64_t fence = 0;
  std::string step;
  std::string data;       // At most 64 KiB.
  uint32_t lease_ms = 0;  // > 0: also renews the lease.
};

// One answer per item, in the items' order: the server's answer, or the
// error that refused that item alone (its code and "items[i].<field>: ..."
// message); nothing was done for a refused item.
using BeginBatchResults = std::vector<absl::StatusOr<v1::BeginResponse>>;
using CompleteBatchResults = std::vector<absl::StatusOr<v1::CompleteResponse>>;

// `options` with its defaults filled in for a client of `addresses` nodes
// (max_attempts 0 resolved as above).
[[nodiscard]] ClientOptions ResolveClientOptions(ClientOptions options,
                                                 size_t addresses);

// Every method returns the server's answer (which may be any of the answer
// statuses, e.g. IN_USE or STALE_FENCE: those are OK responses, not errors),
// or the gRPC error mapped to absl::Status with the same code and message.
class Client {
 public:
  // Connects lazily to `target` (e.g. "127.0.0.1:50051"), without TLS unless
  // options.channel_factory says otherwise.
  explicit Client(const std::string& target, ClientOptions options = {});
  // The nodes of a group (any of them; tried in this order until one answers
  // or names the leader). Every call fails INVALID_ARGUMENT when empty.
  explicit Client(std::vector<std::string> targets, ClientOptions options = {});
  // Uses an existing channel (any credentials); the channel is shared and
  // used as it is: not watched, so after a server restart it may reconnect
  // seconds late (client/channel_watch.h says why). Leaders learnt from it
  // are reached through options.channel_factory.
  explicit Client(std::shared_ptr<grpc::Channel> channel,
                  ClientOptions options = {});
  ~Client();

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // An anonymous Begin (empty owner) whose outcome is unknown is not
  // retried (a retry could only answer IN_USE against its own claim).
  [[nodiscard]] absl::StatusOr<v1::BeginResponse> Begin(
      absl::string_view ns, absl::string_view key, absl::string_view args_hash,
      const BeginOptions& options = {}) const;

  // `ttl_s` 0 keeps the TTL given at Begin.
  [[nodiscard]] absl::StatusOr<v1::CompleteResponse> Complete(
      absl::string_view ns, absl::string_view key, uint64_t fence,
      v1::Outcome outcome, absl::string_view result, uint32_t ttl_s = 0) const;

  // When an attempt's outcome was unknown and the retry finds no record
  // (NOT_FOUND), the first attempt released it: answered OK with `fence`.
  [[nodiscard]] absl::StatusOr<v1::ReleaseResponse> Release(
      absl::string_view ns, absl::string_view key, uint64_t fence) const;

  // `lease_ms` 0 means the server default.
  [[nodiscard]] absl::StatusOr<v1::RenewResponse> Renew(
      absl::string_view ns, absl::string_view key, uint64_t fence,
      uint32_t lease_ms = 0) const;

  // Records the progress of the execution `fence` owns (a step name and up
  // to 64 KiB); a takeover receives the last one in its STARTED answer.
  // `lease_ms` > 0 also renews the lease. Retried like Renew (idempotent:
  // the same checkpoint again changes nothing a reader can see but its
  // time).
  [[nodiscard]] absl::StatusOr<v1::CheckpointResponse> Checkpoint(
      absl::string_view ns, absl::string_view key, uint64_t fence,
      absl::string_view step, absl::string_view data,
      uint32_t lease_ms = 0) const;

  [[nodiscard]] absl::StatusOr<v1::GetResponse> Get(
      absl::string_view ns, absl::string_view key) const;

  [[nodiscard]] absl::StatusOr<v1::ForgetResponse> Forget(
      absl::string_view ns, absl::string_view key) const;

  // Up to the server's batch limit (1000 by default) independent Begins in
  // one call. The call itself fails (e.g. INVALID_ARGUMENT "items: ...") only
  // when the batch as a whole is refused (empty or too large) or the RPC
  // fails; then nothing was done for any item. Same deadline and retry
  // policy as Begin: a retry (on UNAVAILABLE) re-sends every item with its
  // owner.
  //
  // In a group, items are settled one by one: the items refused with
  // UNAVAILABLE (nothing happened) or ABORTED (outcome unknown; a whole RPC
  // answered so counts for each of its items) go again, alone, after
  // backoff, up to max_attempts rounds; an ABORTED Begin only if it has an
  // owner. An item whose outcome was unknown and is not settled answers
  // ABORTED with IsOutcomeUnknown() true, whatever its last round said.
  //
  // Items refused only because the answer already held the server's
  // --max_batch_response_bytes of stored results (IsResultBudgetRefusal,
  // client/batch_answers.h) go again at once, without spending a round, in
  // RPCs of at most as many items as that answer held results, for as long
  // as each answer holds some. So one call may make several RPCs even when
  // nothing fails; its first RPC failing still fails the whole call.
  [[nodiscard]] absl::StatusOr<BeginBatchResults> BeginBatch(
      const std::vector<BeginBatchItem>& items) const;

  // Up to the server's batch limit independent Completes in one call,
  // answered like BeginBatch. Retrying is safe: Complete is idempotent, so
  // every item refused with UNAVAILABLE or ABORTED is sent again.
  [[nodiscard]] absl::StatusOr<CompleteBatchResults> CompleteBatch(
      const std::vector<CompleteBatchItem>& items) const;

  const ClientOptions& options() const { return options_; }

 private:
  // The route of (ns, key), once the first fetch of the shard map ended.
  [[nodiscard]] ShardRouter& Shards() const;

  const ClientOptions options_;
  // Which node calls go to; shared by all threads (it locks internally).
  const std::unique_ptr<ShardRouter> shards_;
};

// The environment variables every dedup client reads, with the same names
// (dedupctl, this library, Python and TypeScript). Unset and empty are the
// same. An explicit setting (a flag, an argument, an option already set)
// always wins over the environment; this library reads it only when asked
// (ClientOptionsFromEnvironment, ClientFromEnvironment).
//   DEDUP_ADDRESS     host:port, or a comma-separated list of a group's nodes
//   DEDUP_TOKEN_FILE  file holding the bearer token sent with every call
//   DEDUP_CA_FILE     PEM CA that signed the server's certificate (TLS on)
//   DEDUP_CERT_FILE   PEM client certificate (mTLS), with DEDUP_KEY_FILE
//   DEDUP_KEY_FILE    PEM key of DEDUP_CERT_FILE
struct ClientEnvironment {
  std::string address;
  std::string token_file;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

// The variables as set now. Thread-safe as getenv is (not against setenv).
[[nodiscard]] ClientEnvironment ReadClientEnvironment();

// "a:1, b:2,a:1" as {"a:1", "b:2"}: split on commas, blanks trimmed,
// duplicates dropped. INVALID_ARGUMENT for an empty entry or list.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> SplitAddressList(
    absl::string_view list);

// `options` with a channel_factory made from DEDUP_TOKEN_FILE, DEDUP_CA_FILE,
// DEDUP_CERT_FILE and DEDUP_KEY_FILE (files read now, the token file once),
// unless options.channel_factory is already set or none of them is.
// INVALID_ARGUMENT naming a file that cannot be read.
[[nodiscard]] absl::StatusOr<ClientOptions> ClientOptionsFromEnvironment(
    ClientOptions options = {});

// A Client of the DEDUP_ADDRESS nodes with ClientOptionsFromEnvironment.
// FAILED_PRECONDITION when DEDUP_ADDRESS is not set.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Client>> ClientFromEnvironment(
    ClientOptions options = {});

}  // namespace dedup

#endif  // DEDUP_CLIENT_DEDUP_CLIENT_H_
