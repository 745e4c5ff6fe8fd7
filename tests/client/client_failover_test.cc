// Leader following and unknown-outcome retries of Client (unary calls and
// RunOnce) against scripted in-process nodes that answer as cluster followers
// and deposed leaders do (see proto/dedup/v1/dedup.proto, "Cluster mode").
#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/coalescing_client.h"
#include "client/dedup_client.h"
#include "client/run_once.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/failover_helpers.h"
#include "tests/client/scripted_node.h"

namespace dedup {
namespace {

using ::dedup::testing::NotLeader;
using ::dedup::testing::OutcomeUnknown;
using ::dedup::testing::ScriptedNode;
using ::google::protobuf::Message;
using ::testing::HasSubstr;

TEST(LeaderFollowingTest, FollowsDedupLeaderToAnAddressNotConfigured) {
  ScriptedNode follower, leader;
  follower.SetScript(FollowerOf(leader.address()));
  leader.SetScript(Leader(7));
  ClientOptions options = FastRetries();
  options.max_attempts = 1;  // A redirect is not a retry.
  Client client(std::vector<std::string>{follower.address()}, options);

  absl::StatusOr<v1::BeginResponse> begin =
      client.Begin("ns", "k", "h", Owner("o"));
  ASSERT_TRUE(begin.ok()) << begin.status();
  EXPECT_EQ(begin->fence(), 7u);
  ASSERT_EQ(follower.calls().size(), 1u);
  ASSERT_EQ(leader.calls().size(), 1u);
  // Same attempt, same deadline: the hop did not start a fresh one.
  EXPECT_LE(leader.calls()[0].deadline_left,
            follower.calls()[0].deadline_left + absl::Milliseconds(20));

  // The leader is remembered: later calls go straight to it.
  ASSERT_TRUE(client.Get("ns", "k").ok());
  ASSERT_TRUE(client.Complete("ns", "k", 7, v1::SUCCESS, "r").ok());
  EXPECT_EQ(follower.calls().size(), 1u);
  EXPECT_EQ(leader.calls().size(), 3u);
}

TEST(LeaderFollowingTest, RedirectsAreBoundedPerAttempt) {
  // Two nodes naming each other: stale hints that never reach a leader.
  ScriptedNode a, b;
  a.SetScript(FollowerOf(b.address()));
  b.SetScript(FollowerOf(a.address()));
  ClientOptions options = FastRetries();
  options.max_attempts = 2;
  options.max_leader_hops = 3;
  Client client(std::vector<std::string>{a.address()}, options);
  const absl::StatusOr<v1::GetResponse> got = client.Get("ns", "k");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  // Per attempt: the first call and 3 redirects.
  EXPECT_EQ(a.calls().size() + b.calls().size(), 8u);
}

TEST(LeaderFollowingTest, UnavailableWithoutLeaderMovesToTheNextAddress) {
  ScriptedNode electing, leader;
  electing.SetScript(FollowerOf(""));  // No leader known yet.
  leader.SetScript(Leader(3));
  Client client(std::vector<std::string>{electing.address(), leader.address()},
                FastRetries());
  ASSERT_TRUE(client.Begin("ns", "k", "h", Owner("o")).ok());
  ASSERT_TRUE(client.Begin("ns", "k2", "h", Owner("o")).ok());
  EXPECT_EQ(electing.calls().size(), 1u);
  EXPECT_EQ(leader.calls().size(), 2u);
}

TEST(LeaderFollowingTest, ConnectionFailureMovesToTheNextAddress) {
  ScriptedNode leader;
  leader.SetScript(Leader(3));
  Client client(std::vector<std::string>{DeadAddress(), leader.address()},
                FastRetries());
  absl::StatusOr<v1::BeginResponse> begin =
      client.Begin("ns", "k", "h", Owner("o"));
  ASSERT_TRUE(begin.ok()) << begin.status();
  EXPECT_EQ(leader.calls().size(), 1u);
}

TEST(LeaderFollowingTest, SeveralAddressesGetALargerRetryBudget) {
  EXPECT_EQ(Client("127.0.0.1:1").options().max_attempts, 5);
  EXPECT_EQ(Client(std::vector<std::string>{"127.0.0.1:1", "127.0.0.2:1"})
                .options()
                .max_attempts,
            10);
  ClientOptions explicit_attempts;
  explicit_attempts.max_attempts = 3;
  EXPECT_EQ(Client(std::vector<std::string>{"127.0.0.1:1", "127.0.0.2:1"},
                   explicit_attempts)
                .options()
                .max_attempts,
            3);
}

TEST(LeaderFollowingTest, EmptyAddressListFailsEveryCall) {
  Client client(std::vector<std::string>{}, FastRetries());
  EXPECT_EQ(client.Get("ns", "k").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LeaderFollowingTest, ConcurrentCallersShareTheLeader) {
  ScriptedNode follower, leader;
  follower.SetScript(FollowerOf(leader.address()));
  leader.SetScript(Leader(1));
  Client client(std::vector<std::string>{follower.address()}, FastRetries());
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) ok += client.Get("ns", "k").ok() ? 1 : 0;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(ok.load(), 160);
  // Only calls that raced the first redirect saw the follower.
  EXPECT_LE(follower.calls().size(), 8u);
}

TEST(UnknownOutcomeTest, BeginIsRetriedWithTheSameOwner) {
  ScriptedNode node;
  node.SetScript(UnknownThen("Begin", 2, Leader(5)));
  Client client(node.address(), FastRetries());
  absl::StatusOr<v1::BeginResponse> begin =
      client.Begin("ns", "k", "h", Owner("owner-1"));
  ASSERT_TRUE(begin.ok()) << begin.status();
  EXPECT_EQ(begin->status(), v1::BeginResponse::STARTED);
  EXPECT_EQ(begin->fence(), 5u);
  const auto begins = node.requests<v1::BeginRequest>("Begin");
  ASSERT_EQ(begins.size(), 3u);
  for (const auto& request : begins) EXPECT_EQ(request.owner(), "owner-1");
}

TEST(UnknownOutcomeTest, AnonymousBeginIsNotRetriedAndSaysUnknown) {
  ScriptedNode node;
  node.SetScript(UnknownThen("Begin", 1, Leader(5)));
  Client client(node.address(), FastRetries());
  const absl::Status status = client.Begin("ns", "k", "h").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(IsOutcomeUnknown(status));
  EXPECT_THAT(status.message(), HasSubstr("outcome unknown"));
  EXPECT_EQ(node.calls().size(), 1u);
}

TEST(UnknownOutcomeTest, CompleteIsRetriedWithTheSameFenceOutcomeAndResult) {
  ScriptedNode node;
  node.SetScript(UnknownThen("Complete", 1, Leader(5)));
  Client client(node.address(), FastRetries());
  absl::StatusOr<v1::CompleteResponse> complete =
      client.Complete("ns", "k", 5, v1::ERROR, "boom", 60);
  ASSERT_TRUE(complete.ok()) << complete.status();
  EXPECT_EQ(complete->status(), v1::CompleteResponse::OK);
  const auto completes = node.requests<v1::CompleteRequest>("Complete");
  ASSERT_EQ(completes.size(), 2u);
  EXPECT_EQ(completes[1].SerializeAsString(), completes[0].SerializeAsString());
  EXPECT_EQ(completes[1].fence(), 5u);
  EXPECT_EQ(completes[1].outcome(), v1::ERROR);
  EXPECT_EQ(completes[1].result(), "boom");
}

TEST(UnknownOutcomeTest, ExhaustedRetriesSayUnknownNotUnavailable) {
  // Unknown once, then no node answers: UNAVAILABLE would read as "nothing
  // happened", which is not known.
  ScriptedNode node;
  node.SetScript(UnknownThen(
      "Complete", 1,
      [](const std::string&, grpc::ServerContext* context, const Message&,
         Message*) { return NotLeader(context, ""); }));
  Client client(node.address(), FastRetries());
  const absl::Status status =
      client.Complete("ns", "k", 5, v1::SUCCESS, "r").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(IsOutcomeUnknown(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("UNAVAILABLE"));
  EXPECT_EQ(node.calls().size(), 4u);  // max_attempts
}

TEST(UnknownOutcomeTest, AlwaysUnknownStopsAtMaxAttempts) {
  ScriptedNode node;
  node.SetScript(UnknownThen("Renew", 1000, Leader(5)));
  Client client(node.address(), FastRetries());
  const absl::Status status = client.Renew("ns", "k", 5).status();
  EXPECT_TRUE(IsOutcomeUnknown(status)) << status;
  EXPECT_EQ(node.calls().size(), 4u);
}

TEST(UnknownOutcomeTest, PlainAbortedIsNotUnknownAndNotRetried) {
  ScriptedNode node;
  node.SetScript(
      [](const std::string&, grpc::ServerContext*, const Message&, Message*) {
        return grpc::Status(grpc::StatusCode::ABORTED, "something else");
      });
  Client client(node.address(), FastRetries());
  const absl::Status status = client.Begin("ns", "k", "h", Owner("o")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(status.message(), "something else");
  EXPECT_FALSE(IsOutcomeUnknown(status));
  EXPECT_EQ(node.calls().size(), 1u);
}

TEST(UnknownOutcomeTest, ReleaseWhoseRetryFindsNoRecordIsReleased) {
  ScriptedNode node;
  node.SetScript(
      UnknownThen("Release", 1,
                  [](const std::string&, grpc::ServerContext*, const Message&,
                     Message* response) {
                    static_cast<v1::ReleaseResponse*>(response)->set_status(
                        v1::ReleaseResponse::NOT_FOUND);
                    return grpc::Status::OK;
                  }));
  Client client(node.address(), FastRetries());
  absl::StatusOr<v1::ReleaseResponse> release = client.Release("ns", "k", 9);
  ASSERT_TRUE(release.ok()) << release.status();
  EXPECT_EQ(release->status(), v1::ReleaseResponse::OK);
  EXPECT_EQ(release->fence(), 9u);
  EXPECT_EQ(node.calls().size(), 2u);
}

TEST(UnknownOutcomeTest, ReleaseNotFoundWithoutUnknownStaysNotFound) {
  ScriptedNode node;
  node.SetScript([](const std::string&, grpc::ServerContext*, const Message&,
                    Message* response) {
    static_cast<v1::ReleaseResponse*>(response)->set_status(
        v1::ReleaseResponse::NOT_FOUND);
    return grpc::Status::OK;
  });
  Client client(node.address(), FastRetries());
  absl::StatusOr<v1::ReleaseResponse> release = client.Release("ns", "k", 9);
  ASSERT_TRUE(release.ok()) << release.status();
  EXPECT_EQ(release->status(), v1::ReleaseResponse::NOT_FOUND);
}

TEST(UnknownOutcomeTest, UnknownThenRedirectFollowsTheNewLeader) {
  // The deposed leader answers unknown, then names its successor.
  ScriptedNode old_leader, new_leader;
  new_leader.SetScript(Leader(4));
  old_leader.SetScript(
      UnknownThen("Begin", 1, FollowerOf(new_leader.address())));
  Client client(old_leader.address(), FastRetries());
  absl::StatusOr<v1::BeginResponse> begin =
      client.Begin("ns", "k", "h", Owner("o"));
  ASSERT_TRUE(begin.ok()) << begin.status();
  EXPECT_EQ(begin->fence(), 4u);
  ASSERT_EQ(new_leader.requests<v1::BeginRequest>("Begin").size(), 1u);
  EXPECT_EQ(new_leader.requests<v1::BeginRequest>("Begin")[0].owner(), "o");
}

TEST(UnknownOutcomeTest, RunOnceCarriesOnThroughUnknownOutcomes) {
  ScriptedNode node;
  node.SetScript(
      UnknownThen("Begin", 1, UnknownThen("Complete", 1, Leader(6))));
  Client client(node.address(), FastRetries());
  int runs = 0;
  absl::StatusOr<RunResult> run =
      RunOnce(client, "ns", "k", "h", [&](const Claim& claim) {
        ++runs;
        EXPECT_EQ(claim.fence, 6u);
        return ExecResult::Success("done");
      });
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(run->fence, 6u);
  const auto begins = node.requests<v1::BeginRequest>("Begin");
  ASSERT_EQ(begins.size(), 2u);
  EXPECT_EQ(begins[0].owner(), begins[1].owner());
  EXPECT_FALSE(begins[0].owner().empty());
  EXPECT_EQ(node.requests<v1::CompleteRequest>("Complete").size(), 2u);
}

TEST(UnknownOutcomeTest, RunOnceReportsAnUnsettledCompleteAsUnknown) {
  ScriptedNode node;
  node.SetScript(UnknownThen("Complete", 1000, Leader(6)));
  Client client(node.address(), FastRetries());
  absl::StatusOr<RunResult> run =
      RunOnce(client, "ns", "k", "h",
              [](const Claim&) { return ExecResult::Success(""); });
  EXPECT_EQ(run.status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(IsOutcomeUnknown(run.status())) << run.status();
  EXPECT_FALSE(CompleteAnswerOf(run.status()).has_value());
  EXPECT_THAT(run.status().message(), HasSubstr("may not be recorded"));
}

}  // namespace
}  // namespace dedup
