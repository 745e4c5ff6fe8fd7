// Session (client/session.h) framing against an in-process fake Session
// service: calls queued while nothing may be written leave as one frame, the
// server's max_in_flight holds, answers in any order reach their callers, a
// broken stream fails its operations and the next one opens a new stream, as
// does a stream left without an answer past an operation's deadline.
// And CoalescingClient over the fake: leader following from an ItemError,
// and the fall-back to batch RPCs on a server without Session.
#include "client/session.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/coalescing_client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/client/batch_service.h"
#include "tests/client/fake_session_service.h"
#include "tests/client/pin_callback_queue.h"

namespace dedup {
namespace {

using ::testing::ElementsAre;

// Collects the answers of a test's operations, by key number.
class Answers {
 public:
  Session::Done For(int n) {
    return [this, n](absl::StatusOr<v1::SessionAnswer> answer) {
      absl::MutexLock lock(&mu_);
      if (answer.ok()) {
        fences_.push_back({n, static_cast<int>(answer->begin().fence())});
      } else {
        errors_.push_back(answer.status());
      }
    };
  }
  // Waits for `n` answers or errors in all.
  void Await(int n) {
    absl::MutexLock lock(&mu_);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return static_cast<int>(fences_.size() + errors_.size()) >= n;
    };
    ASSERT_TRUE(
        mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10)));
  }
  std::vector<std::pair<int, int>> fences() {
    absl::MutexLock lock(&mu_);
    return fences_;
  }
  std::vector<absl::Status> errors() {
    absl::MutexLock lock(&mu_);
    return errors_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::pair<int, int>> fences_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Status> errors_ ABSL_GUARDED_BY(mu_);
};

v1::SessionOp BeginOp(int n) {
  v1::SessionOp op;
  op.mutable_begin()->set_namespace_("session");
  op.mutable_begin()->set_key(absl::StrCat("k", n));
  op.mutable_begin()->set_owner(absl::StrCat("owner-", n));
  return op;
}

struct Fixture {
  explicit Fixture(
      uint32_t max_in_flight,
      FakeSessionService::Mode mode = FakeSessionService::Mode::kSession)
      : service(max_in_flight, mode),
        server(&service),
        channel(grpc::CreateChannel(server.address(),
                                    grpc::InsecureChannelCredentials())),
        stub(v1::Dedup::NewStub(channel)) {}
  FakeSessionService service;
  InProcessServer server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Dedup::Stub> stub;
};

// Operations submitted while the stream may not write (no first frame yet)
// all leave in one frame.
TEST(SessionTest, QueuedBurstLeavesAsOneFrame) {
  Fixture f(/*max_in_flight=*/1000);
  f.service.SetGate(false);
  Answers answers;
  {
    Session session(*f.stub);
    for (int i = 0; i < 50; ++i) session.Submit(BeginOp(i), answers.For(i));
    f.service.SetGate(true);
    ASSERT_TRUE(f.service.AwaitOps(50));
    f.service.AnswerHeld();
    answers.Await(50);
  }
  EXPECT_THAT(f.service.frames(), ElementsAre(50));
  EXPECT_TRUE(answers.errors().empty());
}

// Never more than max_in_flight unanswered; what waited for room leaves as
// one frame once the answers come; answers in reverse order reach the
// operation with their id.
TEST(SessionTest, RespectsMaxInFlightAndMatchesAnswersById) {
  Fixture f(/*max_in_flight=*/10);
  f.service.SetGate(false);
  Answers answers;
  {
    Session session(*f.stub);
    for (int i = 0; i < 25; ++i) session.Submit(BeginOp(i), answers.For(i));
    f.service.SetGate(true);
    ASSERT_TRUE(f.service.AwaitOps(10));
    absl::SleepFor(absl::Milliseconds(100));  // a 2nd frame would be here
    EXPECT_THAT(f.service.frames(), ElementsAre(10));
    f.service.AnswerHeld();
    ASSERT_TRUE(f.service.AwaitOps(20));
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_THAT(f.service.frames(), ElementsAre(10, 10));
    f.service.AnswerHeld();
    ASSERT_TRUE(f.service.AwaitOps(25));
    f.service.AnswerHeld();
    answers.Await(25);
  }
  EXPECT_THAT(f.service.frames(), ElementsAre(10, 10, 5));
  EXPECT_TRUE(answers.errors().empty());
  std::vector<std::pair<int, int>> fences = answers.fences();
  ASSERT_EQ(fences.size(), 25u);
  for (const auto& [n, fence] : fences) EXPECT_EQ(n, fence);
  // Reverse order within a frame: the last of the first frame came first.
  EXPECT_EQ(fences.front().first, 9);
}

// A stream that breaks fails its operations with its status; the next
// operation opens a new stream, which answers it.
TEST(SessionTest, BrokenStreamFailsInFlightAndNextOpReopens) {
  Fixture f(/*max_in_flight=*/100);
  f.service.SetGate(false);
  f.service.BreakOnNextFrame();
  Answers answers;
  Session session(*f.stub);
  for (int i = 0; i < 3; ++i) session.Submit(BeginOp(i), answers.For(i));
  f.service.SetGate(true);
  answers.Await(3);
  ASSERT_EQ(answers.errors().size(), 3u);
  for (const absl::Status& error : answers.errors()) {
    EXPECT_TRUE(absl::IsUnavailable(error)) << error;
  }
  f.service.SetAutoAnswer(true);
  session.Submit(BeginOp(7), answers.For(7));
  answers.Await(4);
  EXPECT_THAT(answers.fences(), ElementsAre(std::make_pair(7, 7)));
  EXPECT_EQ(session.streams_opened(), 2);
  EXPECT_EQ(f.service.streams(), 2);
}

// A server that answers nothing: once an operation is unanswered
// kStallGrace past its deadline the stream is reset, failing it and the
// operation without a deadline beside it UNAVAILABLE; the next operation
// opens a new stream.
TEST(SessionTest, AnOperationUnansweredPastItsDeadlineResetsTheStream) {
  Fixture f(/*max_in_flight=*/100);
  Answers answers;
  Session session(*f.stub);
  v1::SessionOp op = BeginOp(1);
  op.set_timeout_ms(100);
  const absl::Time start = absl::Now();
  session.Submit(op, answers.For(1));
  session.Submit(BeginOp(2), answers.For(2));
  ASSERT_TRUE(f.service.AwaitOps(2));
  answers.Await(2);
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(100) + Session::kStallGrace);
  EXPECT_LT(took,
            absl::Milliseconds(100) + Session::kStallGrace + absl::Seconds(2));
  ASSERT_EQ(answers.errors().size(), 2u);
  for (const absl::Status& error : answers.errors()) {
    EXPECT_TRUE(absl::IsUnavailable(error)) << error;
    EXPECT_THAT(std::string(error.message()),
                ::testing::HasSubstr("the stream was reset"));
  }
  // The fake answers the new stream, and the reset one's operations on it
  // too: ids the session no longer holds, ignored.
  f.service.SetAutoAnswer(true);
  session.Submit(BeginOp(7), answers.For(7));
  answers.Await(3);
  EXPECT_THAT(answers.fences(), ElementsAre(std::make_pair(7, 7)));
  EXPECT_EQ(session.streams_opened(), 2);
}

CoalescingOptions Options() {
  CoalescingOptions options;
  options.rpc.deadline = absl::Seconds(10);
  options.rpc.max_attempts = 3;
  options.rpc.backoff = {absl::Milliseconds(1), absl::Milliseconds(5)};
  options.stream = true;
  return options;
}

BeginBatchItem Item(int n) {
  BeginBatchItem item;
  item.ns = "session";
  item.key = absl::StrCat("k", n);
  item.owner = absl::StrCat("owner-", n);
  return item;
}

// An operation refused UNAVAILABLE naming the leader goes to the leader's
// stream at once, as a batch follows "dedup-leader".
TEST(SessionCoalescingTest, FollowsItemErrorLeader) {
  Fixture follower(100);
  Fixture leader(100);
  v1::ItemError not_leader;
  not_leader.set_code(static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  not_leader.set_message("not the leader");
  not_leader.set_leader(leader.server.address());
  follower.service.SetError(not_leader);
  follower.service.SetAutoAnswer(true);
  leader.service.SetAutoAnswer(true);
  CoalescingClient client(std::vector<std::string>{follower.server.address()},
                          Options());
  absl::StatusOr<v1::BeginResponse> answer = client.Begin(Item(5));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->fence(), 5u);
  EXPECT_THAT(follower.service.frames(), ElementsAre(1));
  EXPECT_THAT(leader.service.frames(), ElementsAre(1));
  EXPECT_EQ(leader.service.batch_items(), 0);
}

// A call refused for the answer frame's result budget goes again at once
// without spending an attempt.
TEST(SessionCoalescingTest, ResultBudgetRefusalsSpendNoAttempt) {
  Fixture f(100);
  f.service.SetAutoAnswer(true);
  f.service.RefuseForBudget(3);
  CoalescingOptions options = Options();
  options.rpc.max_attempts = 1;
  CoalescingClient client(f.channel, options);
  absl::StatusOr<v1::BeginResponse> answer = client.Begin(Item(6));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->fence(), 6u);
  EXPECT_THAT(f.service.frames(), ElementsAre(1, 1, 1, 1));
}

// A tenant over its limits: the operation goes again after the delay the
// server named in ItemError.retry_after_ms, as a unary call waits out its
// RetryInfo; an over-limit error naming no delay is the caller's answer.
TEST(SessionCoalescingTest, OverLimitRefusalsWaitTheNamedDelay) {
  for (const uint32_t retry_ms : {0u, 300u}) {
    Fixture f(100);
    v1::ItemError over;
    over.set_code(static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
    over.set_message("tenant \"t\" is over its limit of 20 requests/s");
    over.set_retry_after_ms(retry_ms);
    f.service.SetError(over);
    f.service.SetAutoAnswer(true);
    CoalescingOptions options = Options();
    options.rpc.max_attempts = 2;
    CoalescingClient client(f.channel, options);
    const absl::Time start = absl::Now();
    absl::StatusOr<v1::BeginResponse> answer = client.Begin(Item(7));
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(answer.status().code(), absl::StatusCode::kResourceExhausted)
        << retry_ms << ": " << answer.status();
    if (retry_ms == 0) {
      EXPECT_THAT(f.service.frames(), ElementsAre(1));
    } else {
      EXPECT_THAT(f.service.frames(), ElementsAre(1, 1));
      EXPECT_GE(took, absl::Milliseconds(retry_ms));
    }
  }
}

// A server without Session (UNIMPLEMENTED, or an older dedupd's "cannot be
// parsed") gets batch RPCs, and the client asks for a stream only once.
void ExpectFallBack(FakeSessionService::Mode mode) {
  Fixture f(100, mode);
  CoalescingClient client(f.channel, Options());
  for (int i = 1; i <= 3; ++i) {
    absl::StatusOr<v1::BeginResponse> answer = client.Begin(Item(i));
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->fence(), static_cast<uint64_t>(i));
  }
  EXPECT_EQ(f.service.streams(), 1);
  EXPECT_EQ(f.service.batch_items(), 3);
}

TEST(SessionCoalescingTest, FallsBackToBatchesOnUnimplemented) {
  ExpectFallBack(FakeSessionService::Mode::kUnimplemented);
}

TEST(SessionCoalescingTest, FallsBackToBatchesOnUnparsedRequest) {
  ExpectFallBack(FakeSessionService::Mode::kUnparsed);
}

// Turned off, the client never opens a stream.
TEST(SessionCoalescingTest, StreamOffSendsBatches) {
  Fixture f(100);
  f.service.SetAutoAnswer(true);  // a stream would be answered too
  CoalescingOptions options = Options();
  options.stream = false;
  CoalescingClient client(f.channel, options);
  absl::StatusOr<v1::BeginResponse> answer = client.Begin(Item(4));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(f.service.streams(), 0);
  EXPECT_EQ(f.service.batch_items(), 1);
}

}  // namespace
}  // namespace dedup
