// Client and RunOnce logic against a scripted in-process server: retries,
// status mapping, deadlines and the RunOnce branches the real server rarely
// produces on demand.
#include <atomic>
#include <string>

#include "absl/time/clock.h"
#include "client/dedup_client.h"
#include "client/run_once.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/fake_dedup_service.h"

namespace dedup {
namespace {

using ::dedup::testing::FakeServer;
using ::testing::HasSubstr;

ClientOptions FastRetries() {
  ClientOptions options;
  options.deadline = absl::Seconds(2);
  options.max_attempts = 4;
  options.backoff = {absl::Milliseconds(1), absl::Milliseconds(5)};
  return options;
}

v1::BeginResponse Started(uint64_t fence) {
  v1::BeginResponse r;
  r.set_status(v1::BeginResponse::STARTED);
  r.set_fence(fence);
  r.set_attempts(1);
  return r;
}

TEST(ClientTest, RetriesUnavailableUpToMaxAttemptsThenReportsIt) {
  FakeServer server;
  Client client(server.address(), FastRetries());
  absl::StatusOr<v1::GetResponse> got = client.Get("ns", "k");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(got.status().message(), "fake: try later");
  EXPECT_EQ(server.service().gets(), 4);
}

TEST(ClientTest, RetriedBeginKeepsItsOwnerAndSucceeds) {
  FakeServer server;
  std::atomic<int> calls{0};
  server.service().OnBegin([&](const v1::BeginRequest&, v1::BeginResponse* r) {
    if (++calls < 3) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "x");
    *r = Started(9);
    return grpc::Status::OK;
  });
  Client client(server.address(), FastRetries());
  BeginOptions options;
  options.owner = "owner-1";
  absl::StatusOr<v1::BeginResponse> begin =
      client.Begin("ns", "k", "hash", options);
  ASSERT_TRUE(begin.ok()) << begin.status();
  EXPECT_EQ(begin->fence(), 9u);
  const auto seen = server.service().begins();
  ASSERT_EQ(seen.size(), 3u);
  for (const auto& call : seen) {
    EXPECT_EQ(call.request.owner(), "owner-1");
    EXPECT_EQ(call.request.namespace_(), "ns");
    EXPECT_EQ(call.request.key(), "k");
    EXPECT_EQ(call.request.args_hash(), "hash");
  }
}

TEST(ClientTest, OtherErrorsAreNotRetriedAndKeepCodeAndMessage) {
  FakeServer server;
  server.service().OnBegin([](const v1::BeginRequest&, v1::BeginResponse*) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "key: empty");
  });
  Client client(server.address(), FastRetries());
  absl::StatusOr<v1::BeginResponse> begin = client.Begin("ns", "", "");
  EXPECT_EQ(begin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(begin.status().message(), "key: empty");
  EXPECT_EQ(server.service().begins().size(), 1u);
}

TEST(ClientTest, BeginDeadlineIsExtendedByWait) {
  FakeServer server;
  server.service().OnBegin([](const v1::BeginRequest&, v1::BeginResponse* r) {
    *r = Started(1);
    return grpc::Status::OK;
  });
  server.service().OnComplete(
      [](const v1::CompleteRequest&, v1::CompleteResponse* r) {
        r->set_status(v1::CompleteResponse::OK);
        return grpc::Status::OK;
      });
  ClientOptions options = FastRetries();
  options.deadline = absl::Seconds(1);
  Client client(server.address(), options);
  BeginOptions begin;
  begin.wait_ms = 5000;
  ASSERT_TRUE(client.Begin("ns", "k", "", begin).ok());
  ASSERT_TRUE(client.Complete("ns", "k", 1, v1::SUCCESS, "r").ok());
  const auto begins = server.service().begins();
  ASSERT_EQ(begins.size(), 1u);
  // deadline + wait_ms; the wire format rounds timeouts up a little.
  EXPECT_GT(begins[0].deadline_left, absl::Milliseconds(5500));
  EXPECT_LE(begins[0].deadline_left, absl::Milliseconds(6100));
  const auto completes = server.service().completes();
  ASSERT_EQ(completes.size(), 1u);
  EXPECT_LE(completes[0].deadline_left, absl::Milliseconds(1100));
}

TEST(ClientTest, DeadlineExceededIsReported) {
  FakeServer server;
  server.service().OnBegin([](const v1::BeginRequest&, v1::BeginResponse* r) {
    absl::SleepFor(absl::Milliseconds(500));
    *r = Started(1);
    return grpc::Status::OK;
  });
  ClientOptions options = FastRetries();
  options.deadline = absl::Milliseconds(100);
  Client client(server.address(), options);
  EXPECT_EQ(client.Begin("ns", "k", "").status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(RunOnceTest, StaleFenceOnCompleteIsAbortedAndDistinct) {
  FakeServer server;
  server.service().OnBegin([](const v1::BeginRequest&, v1::BeginResponse* r) {
    *r = Started(4);
    return grpc::Status::OK;
  });
  server.service().OnComplete(
      [](const v1::CompleteRequest&, v1::CompleteResponse* r) {
        r->set_status(v1::CompleteResponse::STALE_FENCE);
        r->set_fence(5);
        return grpc::Status::OK;
      });
  Client client(server.address(), FastRetries());
  int calls = 0;
  absl::StatusOr<RunResult> run =
      RunOnce(client, "ns", "k", "h", [&](const Claim& claim) {
        ++calls;
        EXPECT_EQ(claim.fence, 4u);
        return ExecResult::Success("done");
      });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(IsStaleFence(run.status()));
  EXPECT_EQ(CompleteAnswerOf(run.status()), v1::CompleteResponse::STALE_FENCE);
  EXPECT_FALSE(IsConflict(run.status()));
  EXPECT_THAT(run.status().message(), HasSubstr("NOT recorded"));
}

TEST(RunOnceTest, NotFoundOnCompleteIsAbortedButNotStale) {
  FakeServer server;
  server.service().OnBegin([](const v1::BeginRequest&, v1::BeginResponse* r) {
    *r = Started(4);
    return grpc::Status::OK;
  });
  server.service().OnComplete(
      [](const v1::CompleteRequest&, v1::CompleteResponse* r) {
        r->set_status(v1::CompleteResponse::NOT_FOUND);
        return grpc::Status::OK;
      });
  Client client(server.address(), FastRetries());
  absl::StatusOr<RunResult> run =
      RunOnce(client, "ns", "k", "h",
              [](const Claim&) { return ExecResult::Success(""); });
  EXPECT_EQ(CompleteAnswerOf(run.status()), v1::CompleteResponse::NOT_FOUND);
  EXPECT_FALSE(IsStaleFence(run.status()));
}

TEST(RunOnceTest, ConflictIsFailedPreconditionAndFnNotCalled) {
  FakeServer server;
  server.service().OnBegin([](const v1::BeginRequest&, v1::BeginResponse* r) {
    r->set_status(v1::BeginResponse::CONFLICT);
    r->set_fence(2);
    return grpc::Status::OK;
  });
  Client client(server.address(), FastRetries());
  bool called = false;
  absl::StatusOr<RunResult> run =
      RunOnce(client, "ns", "k", "h", [&](const Claim&) {
        called = true;
        return ExecResult::Success("");
      });
  EXPECT_FALSE(called);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(IsConflict(run.status()));
  EXPECT_FALSE(CompleteAnswerOf(run.status()).has_value());
  EXPECT_THAT(run.status().message(), HasSubstr("CONFLICT"));
}

TEST(RunOnceTest, InUseWaitsWithFreshOwnerThenRuns) {
  FakeServer server;
  std::atomic<int> calls{0};
  server.service().OnBegin([&](const v1::BeginRequest&, v1::BeginResponse* r) {
    if (++calls == 1) {
      r->set_status(v1::BeginResponse::IN_USE);
      r->set_retry_after_ms(100);
    } else {
      *r = Started(3);
      r->set_takeover(true);
    }
    return grpc::Status::OK;
  });
  server.service().OnComplete(
      [](const v1::CompleteRequest&, v1::CompleteResponse* r) {
        r->set_status(v1::CompleteResponse::OK);
        return grpc::Status::OK;
      });
  Client client(server.address(), FastRetries());
  RunOptions options;
  options.wait_per_call = absl::Seconds(7);
  absl::StatusOr<RunResult> run = RunOnce(
      client, "ns", "k", "h",
      [](const Claim& claim) {
        EXPECT_TRUE(claim.takeover);
        return ExecResult::PermanentError("nope");
      },
      options);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->outcome, v1::ERROR);
  EXPECT_EQ(run->result, "nope");
  EXPECT_FALSE(run->duplicate);
  EXPECT_TRUE(run->takeover);
  EXPECT_EQ(run->fence, 3u);

  const auto begins = server.service().begins();
  ASSERT_EQ(begins.size(), 2u);
  EXPECT_EQ(begins[0].request.wait_ms(), 0u);
  EXPECT_EQ(begins[1].request.wait_ms(), 7000u);
  EXPECT_NE(begins[0].request.owner(), begins[1].request.owner());
  const auto completes = server.service().completes();
  ASSERT_EQ(completes.size(), 1u);
  EXPECT_EQ(completes[0].request.outcome(), v1::ERROR);
  EXPECT_EQ(completes[0].request.result(), "nope");
  EXPECT_EQ(completes[0].request.fence(), 3u);
}

TEST(RunOnceTest, InUsePastDeadlineIsDeadlineExceededWithoutSpinning) {
  FakeServer server;
  // A server that ignores wait_ms: RunOnce must pace itself.
  server.service().OnBegin([](const v1::BeginRequest&, v1::BeginResponse* r) {
    r->set_status(v1::BeginResponse::IN_USE);
    r->set_retry_after_ms(50);
    return grpc::Status::OK;
  });
  Client client(server.address(), FastRetries());
  RunOptions options;
  options.deadline = absl::Milliseconds(400);
  const absl::Time start = absl::Now();
  absl::StatusOr<RunResult> run = RunOnce(
      client, "ns", "k", "h",
      [](const Claim&) { return ExecResult::Success(""); }, options);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(run.status().message(), HasSubstr("IN_USE"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(390));
  EXPECT_LE(server.service().begins().size(), 12u);
  for (const auto& call : server.service().begins()) {
    EXPECT_LE(call.request.wait_ms(), 400u);
  }
}

TEST(RunOnceTest, RetryableReleasesAndReturnsTheCallersStatus) {
  FakeServer server;
  server.service().OnBegin([](const v1::BeginRequest&, v1::BeginResponse* r) {
    *r = Started(8);
    return grpc::Status::OK;
  });
  server.service().OnRelease(
      [](const v1::ReleaseRequest&, v1::ReleaseResponse* r) {
        r->set_status(v1::ReleaseResponse::OK);
        return grpc::Status::OK;
      });
  Client client(server.address(), FastRetries());
  absl::StatusOr<RunResult> run =
      RunOnce(client, "ns", "k", "h", [](const Claim&) {
        return ExecResult::Retryable(absl::UnavailableError("smtp down"));
      });
  EXPECT_EQ(run.status(), absl::UnavailableError("smtp down"));
  const auto releases = server.service().releases();
  ASSERT_EQ(releases.size(), 1u);
  EXPECT_EQ(releases[0].request.fence(), 8u);
  EXPECT_TRUE(server.service().completes().empty());
}

TEST(RunOnceTest, RetryableWithOkStatusBecomesUnknown) {
  FakeServer server;
  server.service().OnBegin([](const v1::BeginRequest&, v1::BeginResponse* r) {
    *r = Started(8);
    return grpc::Status::OK;
  });
  Client client(server.address(), FastRetries());
  absl::StatusOr<RunResult> run = RunOnce(
      client, "ns", "k", "h",
      [](const Claim&) { return ExecResult::Retryable(absl::OkStatus()); });
  EXPECT_EQ(run.status().code(), absl::StatusCode::kUnknown);
}

}  // namespace
}  // namespace dedup
