#include "client/dedup_client.h"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/batch_answers.h"
#include "client/retry_decision.h"
#include "client/retrying_call.h"
#include "client/shard_router.h"
#include "common/channel_security.h"
#include "grpcpp/client_context.h"

namespace dedup {
namespace {

using Stub = v1::Dedup::Stub;

template <typename Request, typename Response>
using RpcMethod = grpc::Status (Stub::*)(grpc::ClientContext*, const Request&,
                                         Response*);

// The answer of a finished RetryingCall, or its error. An error after any
// unknown outcome stays unknown: an earlier attempt may have taken effect.
template <typename Response>
absl::StatusOr<Response> Conclude(absl::string_view method,
                                  const CallOutcome& outcome,
                                  Response response) {
  if (outcome.status.ok()) return response;
  const absl::Status last = ToAbslStatus(outcome.status);
  if (outcome.outcome_unknown) return OutcomeUnknownError(method, last);
  return last;
}

using Route = ShardRouter::Route;

// Runs the call on `route`'s router; every attempt's trailers go to the
// shard router (epoch changes, leader hints).
template <typename Request, typename Response>
CallOutcome Send(ShardRouter& shards, const Route& route,
                 const ClientOptions& options,
                 RpcMethod<Request, Response> method, const Request& request,
                 absl::Duration extra_deadline, bool retry_unknown,
                 Response* response) {
  return RetryingCall(
      *route.router, options, extra_deadline, retry_unknown,
      [&](const Endpoint& endpoint, grpc::ClientContext* context) {
        response->Clear();
        grpc::Status status =
            ((*endpoint.stub).*method)(context, request, response);
        shards.Observe(route, endpoint, *context, status);
        return status;
      });
}

// A unary call, sent to its key's group.
template <typename Request, typename Response>
absl::StatusOr<Response> Call(
    absl::string_view name, ShardRouter& shards, const ClientOptions& options,
    RpcMethod<Request, Response> method, const Request& request,
    absl::Duration extra_deadline = absl::ZeroDuration(),
    bool retry_unknown = true) {
  Response response;
  const CallOutcome outcome =
      Send(shards, shards.RouteOf(request.namespace_(), request.key()), options,
           method, request, extra_deadline, retry_unknown, &response);
  return Conclude(name, outcome, std::move(response));
}

// A batch call settled item by item: the items refused with UNAVAILABLE or
// ABORTED (outcome unknown; a whole RPC answered so counts for each item) go
// again alone, after backoff, up to max_attempts rounds; an ABORTED one only
// when `resendable`. Fails as a whole only when its first RPC does (other
// than with an unknown outcome): then nothing was done for any item; a later
// RPC's failure becomes each of its items' answer.
//
// Except the items refused because the answer already held the server's
// --max_batch_response_bytes of stored results (IsResultBudgetRefusal): a
// batch of many Begins of one key with a large result would otherwise go
// again all together round after round, a few answered each time, until
// the rounds ran out. They are not failures. They go again at once within
// the round (no backoff, no round spent), one RPC after another, in groups
// of at most as many items as that answer held results (`holds_result`),
// which is about what fits one answer (a key's results have one size); a
// group still too large splits again the same way. That ends: a re-send is
// free only when the answer held a result, so each group is smaller than
// the RPC it came from. An answer that held none (one result larger than
// the whole budget, e.g. stored under a larger --max_result_bytes) makes
// its refused items ordinary UNAVAILABLEs.
//
// `numbering[i]` is item i's position in the caller's batch (this may be
// one group's part of it), as item errors name it.
template <typename Answer, typename Request, typename Response,
          typename Resendable, typename HoldsResult>
absl::StatusOr<std::vector<absl::StatusOr<Answer>>> BatchCall(
    absl::string_view name, ShardRouter& shards, const Route& route,
    const ClientOptions& options, RpcMethod<Request, Response> method,
    const Request& request, Resendable resendable, HoldsResult holds_result,
    const std::vector<int>& numbering) {
  const int n = request.items_size();
  std::vector<absl::StatusOr<Answer>> results(n,
                                              absl::InternalError("no answer"));
  std::vector<bool> was_unknown(n, false);
  std::vector<int> pending(n);
  for (int i = 0; i < n; ++i) pending[i] = i;
  auto item_name = [&](int i) {
    return absl::StrCat(name, " items[", numbering[i], "]");
  };
  bool sent = false;  // an RPC was answered or failed

  const int rounds = std::max(options.max_attempts, 1);
  for (int round = 0;; ++round) {
    std::vector<int> again;
    // The RPCs of this round: `pending`, then the groups refused for the
    // result budget, first in first out.
    std::deque<std::vector<int>> groups = {std::move(pending)};
    while (!groups.empty()) {
      const std::vector<int> group = std::move(groups.front());
      groups.pop_front();
      // The first RPC sends the caller's request as built (all its items).
      const bool whole = round == 0 && group.size() == static_cast<size_t>(n);
      Request subset;
      if (!whole) {
        for (int i : group) *subset.add_items() = request.items(i);
      }
      Response response;
      // Unknown outcomes are retried here, per item: only the items for
      // which that is safe.
      const CallOutcome outcome =
          Send(shards, route, options, method, whole ? request : subset,
               absl::ZeroDuration(), /*retry_unknown=*/false, &response);
      absl::StatusOr<std::vector<absl::StatusOr<Answer>>> answers;
      if (outcome.outcome_unknown) {
        answers = std::vector<absl::StatusOr<Answer>>(
            group.size(), absl::AbortedError(outcome.status.error_message()));
      } else {
        answers = FromBatchResponse<Answer>(
            name, static_cast<int>(group.size()),
            Conclude(name, outcome, std::move(response)));
      }
      if (!answers.ok()) {
        if (!sent) return answers.status();
        for (int i : group) {
          results[i] =
              SettledItemError(item_name(i), was_unknown[i], answers.status());
        }
        continue;
      }
      sent = true;

      size_t fitted = 0;
      for (const absl::StatusOr<Answer>& answer : *answers) {
        if (answer.ok() && holds_result(*answer)) ++fitted;
      }
      std::vector<int> refused;
      for (size_t j = 0; j < group.size(); ++j) {
        const int i = group[j];
        absl::StatusOr<Answer>& answer = (*answers)[j];
        if (answer.ok()) {
          results[i] = std::move(answer);
          continue;
        }
        const absl::Status error =
            RenumberItem(answer.status(), static_cast<int>(j), numbering[i]);
        results[i] = error;
        if (fitted > 0 && IsResultBudgetRefusal(error)) {
          refused.push_back(i);
        } else {
          if (absl::IsAborted(error)) was_unknown[i] = true;
          if (ItemResendable(error, resendable(request.items(i)))) {
            again.push_back(i);
          }
        }
      }
      // Before the other groups: their items waited longer.
      for (size_t k = refused.size(); k > 0;) {
        const size_t begin = (k - 1) / fitted * fitted;
        groups.emplace_front(refused.begin() + begin, refused.begin() + k);
        k = begin;
      }
    }
    const bool last_round = round + 1 >= rounds;
    if (again.empty() || last_round) {
      for (int i = 0; i < n; ++i) {
        if (!results[i].ok()) {
          results[i] = SettledItemError(item_name(i), was_unknown[i],
                                        results[i].status());
        }
      }
      return results;
    }
    pending = std::move(again);
    absl::SleepFor(
        FullJitterBackoff(options.backoff, round, ThreadLocalUniform01));
  }
}

// A batch split by the group of each item's key: one BatchCall per group,
// run in parallel, answers merged back in the caller's order. Fails as a
// whole only when every group's call does (then nothing was done); a group
// whose call failed gives that error to each of its items.
template <typename Answer, typename Request, typename Response,
          typename Resendable, typename HoldsResult>
absl::StatusOr<std::vector<absl::StatusOr<Answer>>> RoutedBatchCall(
    absl::string_view name, ShardRouter& shards, const ClientOptions& options,
    RpcMethod<Request, Response> method, const Request& request,
    Resendable resendable, HoldsResult holds_result) {
  const int n = request.items_size();
  std::vector<Route> routes;
  std::vector<std::vector<int>> members;  // per route: the caller's indexes
  for (int i = 0; i < n; ++i) {
    Route route =
        shards.RouteOf(request.items(i).namespace_(), request.items(i).key());
    size_t p = 0;
    while (p < routes.size() && routes[p].router != route.router) ++p;
    if (p == routes.size()) {
      routes.push_back(std::move(route));
      members.emplace_back();
    }
    members[p].push_back(i);
  }
  if (routes.size() <= 1) {
    std::vector<int> numbering(n);
    for (int i = 0; i < n; ++i) numbering[i] = i;
    return BatchCall<Answer>(
        name, shards,
        routes.empty() ? shards.RouteOfGroup(ShardRouter::kNoGroup) : routes[0],
        options, method, request, resendable, holds_result, numbering);
  }
  std::vector<absl::StatusOr<std::vector<absl::StatusOr<Answer>>>> parts(
      routes.size(), absl::InternalError("no answer"));
  auto run = [&](size_t p) {
    Request part;
    for (int i : members[p]) *part.add_items() = request.items(i);
    parts[p] = BatchCall<Answer>(name, shards, routes[p], options, method, part,
                                 resendable, holds_result, members[p]);
  };
  std::vector<std::thread> threads;
  for (size_t p = 1; p < routes.size(); ++p) threads.emplace_back(run, p);
  run(0);
  for (std::thread& thread : threads) thread.join();
  const auto any_ok = std::find_if(parts.begin(), parts.end(),
                                   [](const auto& part) { return part.ok(); });
  if (any_ok == parts.end()) return parts[0].status();
  std::vector<absl::StatusOr<Answer>> results(n,
                                              absl::InternalError("no answer"));
  for (size_t p = 0; p < routes.size(); ++p) {
    for (size_t j = 0; j < members[p].size(); ++j) {
      results[members[p][j]] = parts[p].ok()
                                   ? std::move((*parts[p])[j])
                                   : absl::StatusOr<Answer>(parts[p].status());
    }
  }
  return results;
}

}  // namespace

Client::Client(const std::string& target, ClientOptions options)
    : Client(std::vector<std::string>{target}, std::move(options)) {}

ClientOptions ResolveClientOptions(ClientOptions options, size_t addresses) {
  if (options.max_attempts == 0) options.max_attempts = addresses > 1 ? 10 : 5;
  return options;
}

Client::Client(std::vector<std::string> targets, ClientOptions options)
    : options_(ResolveClientOptions(std::move(options), targets.size())),
      shards_(std::make_unique<ShardRouter>(
          std::make_shared<LeaderRouter>(std::move(targets),
                                         options_.channel_factory),
          options_.deadline)) {}

Client::Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : options_(ResolveClientOptions(std::move(options), 1)),
      shards_(std::make_unique<ShardRouter>(
          std::make_shared<LeaderRouter>(std::move(channel),
                                         options_.channel_factory),
          options_.deadline)) {}

Client::~Client() = default;

ShardRouter& Client::Shards() const {
  // Returns at once after the first fetch ended; until then a call waits
  // for it, so even the first call goes straight to its group.
  shards_->AwaitFirstFetch(options_.deadline);
  return *shards_;
}

absl::StatusOr<v1::BeginResponse> Client::Begin(
    absl::string_view ns, absl::string_view key, absl::string_view args_hash,
    const BeginOptions& options) const {
  v1::BeginRequest request;
  request.set_namespace_(std::string(ns));
  request.set_key(std::string(key));
  request.set_args_hash(std::string(args_hash));
  request.set_owner(options.owner);
  request.set_lease_ms(options.lease_ms);
  request.set_ttl_s(options.ttl_s);
  request.set_accept_rerun(options.accept_rerun);
  request.set_wait_ms(options.wait_ms);
  // Only an owner makes a repeated Begin re-enter its own claim.
  return Call("Begin", Shards(), options_, &Stub::Begin, request,
              absl::Milliseconds(options.wait_ms),
              /*retry_unknown=*/!options.owner.empty());
}

absl::StatusOr<v1::CompleteResponse> Client::Complete(
    absl::string_view ns, absl::string_view key, uint64_t fence,
    v1::Outcome outcome, absl::string_view result, uint32_t ttl_s) const {
  v1::CompleteRequest request;
  request.set_namespace_(std::string(ns));
  request.set_key(std::string(key));
  request.set_fence(fence);
  request.set_outcome(outcome);
  request.set_result(std::string(result));
  request.set_ttl_s(ttl_s);
  return Call("Complete", Shards(), options_, &Stub::Complete, request);
}

absl::StatusOr<v1::ReleaseResponse> Client::Release(absl::string_view ns,
                                                    absl::string_view key,
                                                    uint64_t fence) const {
  v1::ReleaseRequest request;
  request.set_namespace_(std::string(ns));
  request.set_key(std::string(key));
  request.set_fence(fence);
  v1::ReleaseResponse response;
  ShardRouter& shards = Shards();
  const CallOutcome outcome =
      Send(shards, shards.RouteOf(ns, key), options_, &Stub::Release, request,
           absl::ZeroDuration(), /*retry_unknown=*/true, &response);
  // A successful Release deletes the record, so a retry of one that took
  // effect finds nothing: that is the first attempt's success.
  if (outcome.status.ok() && outcome.outcome_unknown &&
      response.status() == v1::ReleaseResponse::NOT_FOUND) {
    response.set_status(v1::ReleaseResponse::OK);
    response.set_fence(fence);
  }
  return Conclude("Release", outcome, std::move(response));
}

absl::StatusOr<v1::RenewResponse> Client::Renew(absl::string_view ns,
                                                absl::string_view key,
                                                uint64_t fence,
                                                uint32_t lease_ms) const {
  v1::RenewRequest request;
  request.set_namespace_(std::string(ns));
  request.set_key(std::string(key));
  request.set_fence(fence);
  request.set_lease_ms(lease_ms);
  return Call("Renew", Shards(), options_, &Stub::Renew, request);
}

absl::StatusOr<v1::CheckpointResponse> Client::Checkpoint(
    absl::string_view ns, absl::string_view key, uint64_t fence,
    absl::string_view step, absl::string_view data, uint32_t lease_ms) const {
  v1::CheckpointRequest request;
  request.set_namespace_(std::string(ns));
  request.set_key(std::string(key));
  request.set_fence(fence);
  request.set_step(std::string(step));
  request.set_data(std::string(data));
  request.set_lease_ms(lease_ms);
  return Call("Checkpoint", Shards(), options_, &Stub::Checkpoint, request);
}

absl::StatusOr<v1::GetResponse> Client::Get(absl::string_view ns,
                                            absl::string_view key) const {
  v1::GetRequest request;
  request.set_namespace_(std::string(ns));
  request.set_key(std::string(key));
  return Call("Get", Shards(), options_, &Stub::Get, request);
}

absl::StatusOr<v1::ForgetResponse> Client::Forget(absl::string_view ns,
                                                  absl::string_view key) const {
  v1::ForgetRequest request;
  request.set_namespace_(std::string(ns));
  request.set_key(std::string(key));
  return Call("Forget", Shards(), options_, &Stub::Forget, request);
}

absl::StatusOr<BeginBatchResults> Client::BeginBatch(
    const std::vector<BeginBatchItem>& items) const {
  v1::BeginBatchRequest request;
  request.mutable_items()->Reserve(static_cast<int>(items.size()));
  for (const BeginBatchItem& item : items) {
    ToProto(item, request.add_items());
  }
  // Built once and re-sent as is by every attempt: that keeps each item's
  // owner across retries. No extra deadline: batch items never wait.
  return RoutedBatchCall<v1::BeginResponse>(
      "BeginBatch", Shards(), options_, &Stub::BeginBatch, request,
      [](const v1::BeginRequest& item) { return !item.owner().empty(); },
      [](const v1::BeginResponse& answer) { return !answer.result().empty(); });
}

absl::StatusOr<CompleteBatchResults> Client::CompleteBatch(
    const std::vector<CompleteBatchItem>& items) const {
  v1::CompleteBatchRequest request;
  request.mutable_items()->Reserve(static_cast<int>(items.size()));
  for (const CompleteBatchItem& item : items) {
    ToProto(item, request.add_items());
  }
  return RoutedBatchCall<v1::CompleteResponse>(
      "CompleteBatch", Shards(), options_, &Stub::CompleteBatch, request,
      [](const v1::CompleteRequest&) { return true; },
      [](const v1::CompleteResponse&) { return false; });
}

namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

}  // namespace

ClientEnvironment ReadClientEnvironment() {
  ClientEnvironment env;
  env.address = Env("DEDUP_ADDRESS");
  env.token_file = Env("DEDUP_TOKEN_FILE");
  env.ca_file = Env("DEDUP_CA_FILE");
  env.cert_file = Env("DEDUP_CERT_FILE");
  env.key_file = Env("DEDUP_KEY_FILE");
  return env;
}

absl::StatusOr<std::vector<std::string>> SplitAddressList(
    absl::string_view list) {
  std::vector<std::string> addresses;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("empty entry in the address list '", list, "'"));
    }
    if (std::find(addresses.begin(), addresses.end(), entry) ==
        addresses.end()) {
      addresses.emplace_back(entry);
    }
  }
  return addresses;
}

absl::StatusOr<ClientOptions> ClientOptionsFromEnvironment(
    ClientOptions options) {
  const ClientEnvironment env = ReadClientEnvironment();
  if (options.channel_factory ||
      (env.token_file.empty() && env.ca_file.empty() && env.cert_file.empty() &&
       env.key_file.empty())) {
    return options;
  }
  absl::StatusOr<ChannelSecurity> security = ChannelSecurityFromFiles(
      env.ca_file, env.cert_file, env.key_file, env.token_file);
  if (!security.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DEDUP_*_FILE: ", security.status().message()));
  }
  options.channel_factory = SecureChannelFactory(*std::move(security));
  return options;
}

absl::StatusOr<std::unique_ptr<Client>> ClientFromEnvironment(
    ClientOptions options) {
  const std::string address = ReadClientEnvironment().address;
  if (address.empty()) {
    return absl::FailedPreconditionError("DEDUP_ADDRESS is not set");
  }
  absl::StatusOr<std::vector<std::string>> addresses =
      SplitAddressList(address);
  if (!addresses.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DEDUP_ADDRESS: ", addresses.status().message()));
  }
  absl::StatusOr<ClientOptions> resolved =
      ClientOptionsFromEnvironment(std::move(options));
  if (!resolved.ok()) return resolved.status();
  return std::make_unique<Client>(*std::move(addresses), *std::move(resolved));
}

}  // namespace dedup
