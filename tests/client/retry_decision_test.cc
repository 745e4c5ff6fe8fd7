// DecideRetry and ItemResendable on hand-built replies: no server.
#include "client/retry_decision.h"

#include <string>

#include "dedup/v1/error_details.pb.h"
#include "gtest/gtest.h"

namespace dedup {
namespace {

constexpr char kSelf[] = "10.0.0.1:7000";
constexpr char kOther[] = "10.0.0.2:7000";

double Half() { return 0.5; }

ClientOptions Options(int max_attempts = 5) {
  ClientOptions options;
  options.max_attempts = max_attempts;
  options.max_leader_hops = 3;
  options.backoff.base = absl::Milliseconds(50);
  options.backoff.cap = absl::Seconds(2);
  return options;
}

AttemptReply Reply(grpc::StatusCode code, std::string leader = "",
                   bool unknown_trailer = false) {
  AttemptReply reply;
  reply.status = grpc::Status(code, "refused");
  reply.leader = std::move(leader);
  reply.unknown_trailer = unknown_trailer;
  return reply;
}

// RESOURCE_EXHAUSTED carrying a google.rpc.RetryInfo of `delay`.
AttemptReply OverLimit(absl::Duration delay) {
  v1::RetryInfo retry;
  retry.mutable_retry_delay()->set_seconds(
      absl::IDivDuration(delay, absl::Seconds(1), &delay));
  retry.mutable_retry_delay()->set_nanos(
      static_cast<int32_t>(absl::ToInt64Nanoseconds(delay)));
  v1::RpcStatus details;
  details.set_code(grpc::StatusCode::RESOURCE_EXHAUSTED);
  google::protobuf::Any* any = details.add_details();
  any->set_type_url("type.googleapis.com/google.rpc.RetryInfo");
  any->set_value(retry.SerializeAsString());
  AttemptReply reply;
  reply.status = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                              "over the limit", details.SerializeAsString());
  return reply;
}

RetryDecision Decide(const AttemptReply& reply, int attempt, int hops = 0,
                     bool retry_unknown = true, int max_attempts = 5) {
  return DecideRetry(reply, AttemptState{kSelf, attempt, hops},
                     Options(max_attempts), retry_unknown, Half);
}

TEST(DecideRetryTest, OkIsTheAnswer) {
  const RetryDecision d = Decide(AttemptReply{}, 1);
  EXPECT_EQ(d.action, RetryAction::kAnswer);
  EXPECT_FALSE(d.advance);
  EXPECT_FALSE(d.outcome_unknown);
}

TEST(DecideRetryTest, OtherErrorsAreTheAnswer) {
  for (grpc::StatusCode code :
       {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::NOT_FOUND,
        grpc::StatusCode::DEADLINE_EXCEEDED, grpc::StatusCode::ABORTED,
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        grpc::StatusCode::FAILED_PRECONDITION}) {
    const RetryDecision d = Decide(Reply(code, kOther), 1);
    EXPECT_EQ(d.action, RetryAction::kAnswer) << code;
    EXPECT_FALSE(d.advance) << code;
    EXPECT_FALSE(d.outcome_unknown) << code;
  }
}

TEST(DecideRetryTest, FollowsALeaderHintWithinTheAttempt) {
  const RetryDecision d =
      Decide(Reply(grpc::StatusCode::UNAVAILABLE, kOther), 5, 2);
  EXPECT_EQ(d.action, RetryAction::kFollowLeader);
  EXPECT_EQ(d.leader, kOther);
  EXPECT_FALSE(d.advance);
}

TEST(DecideRetryTest, HopsUsedUpMeansAdvanceAndBackoff) {
  const RetryDecision d =
      Decide(Reply(grpc::StatusCode::UNAVAILABLE, kOther), 1, 3);
  EXPECT_EQ(d.action, RetryAction::kRetry);
  EXPECT_TRUE(d.advance);
  EXPECT_EQ(d.delay, absl::Milliseconds(25));  // 0.5 * 50ms * 2^0
}

TEST(DecideRetryTest, ANodeNamingItselfIsLeft) {
  const RetryDecision d =
      Decide(Reply(grpc::StatusCode::UNAVAILABLE, kSelf), 3);
  EXPECT_EQ(d.action, RetryAction::kRetry);
  EXPECT_TRUE(d.advance);
  EXPECT_EQ(d.delay, absl::Milliseconds(100));  // 0.5 * 50ms * 2^2
}

TEST(DecideRetryTest, UnavailableOnTheLastAttemptAdvancesAndAnswers) {
  const RetryDecision d = Decide(Reply(grpc::StatusCode::UNAVAILABLE), 5);
  EXPECT_EQ(d.action, RetryAction::kAnswer);
  EXPECT_TRUE(d.advance);
}

TEST(DecideRetryTest, ZeroMaxAttemptsMeansOne) {
  const RetryDecision d =
      Decide(Reply(grpc::StatusCode::UNAVAILABLE), 1, 0, true, 0);
  EXPECT_EQ(d.action, RetryAction::kAnswer);
}

TEST(DecideRetryTest, BackoffIsCapped) {
  const RetryDecision d =
      Decide(Reply(grpc::StatusCode::UNAVAILABLE), 40, 0, true, 100);
  EXPECT_EQ(d.action, RetryAction::kRetry);
  EXPECT_EQ(d.delay, absl::Seconds(1));  // 0.5 * 2s cap
}

TEST(DecideRetryTest, ServerDelayReplacesBackoff) {
  const RetryDecision d = Decide(OverLimit(absl::Milliseconds(1500)), 4);
  EXPECT_EQ(d.action, RetryAction::kRetry);
  EXPECT_EQ(d.delay, absl::Milliseconds(1500));
  EXPECT_FALSE(d.advance);
}

TEST(DecideRetryTest, ServerDelayIsCapped) {
  const RetryDecision d = Decide(OverLimit(absl::Minutes(10)), 1);
  EXPECT_EQ(d.action, RetryAction::kRetry);
  EXPECT_EQ(d.delay, absl::Seconds(30));
}

TEST(DecideRetryTest, ServerDelayOnTheLastAttemptAnswers) {
  const RetryDecision d = Decide(OverLimit(absl::Seconds(1)), 5);
  EXPECT_EQ(d.action, RetryAction::kAnswer);
  EXPECT_FALSE(d.advance);
}

TEST(DecideRetryTest, UnknownOutcomeRetriedWhenSafe) {
  const RetryDecision d = Decide(Reply(grpc::StatusCode::ABORTED, "", true), 2);
  EXPECT_EQ(d.action, RetryAction::kRetry);
  EXPECT_EQ(d.delay, absl::Milliseconds(50));  // 0.5 * 50ms * 2^1
  EXPECT_FALSE(d.advance);  // the same node will name the new leader
  EXPECT_TRUE(d.outcome_unknown);
}

TEST(DecideRetryTest, UnknownOutcomeAnsweredWhenNotSafe) {
  const RetryDecision d =
      Decide(Reply(grpc::StatusCode::ABORTED, "", true), 1, 0, false);
  EXPECT_EQ(d.action, RetryAction::kAnswer);
  EXPECT_TRUE(d.outcome_unknown);
}

TEST(DecideRetryTest, UnknownOutcomeOnTheLastAttemptAnswers) {
  const RetryDecision d = Decide(Reply(grpc::StatusCode::ABORTED, "", true), 5);
  EXPECT_EQ(d.action, RetryAction::kAnswer);
  EXPECT_TRUE(d.outcome_unknown);
}

TEST(ItemResendableTest, UnavailableAlwaysAbortedOnlyWhenSafe) {
  EXPECT_TRUE(ItemResendable(absl::UnavailableError("x"), false));
  EXPECT_TRUE(ItemResendable(absl::AbortedError("x"), true));
  EXPECT_FALSE(ItemResendable(absl::AbortedError("x"), false));
  EXPECT_FALSE(ItemResendable(absl::ResourceExhaustedError("x"), true));
  EXPECT_FALSE(ItemResendable(absl::InvalidArgumentError("x"), true));
  EXPECT_FALSE(ItemResendable(absl::OkStatus(), true));
}

}  // namespace
}  // namespace dedup
