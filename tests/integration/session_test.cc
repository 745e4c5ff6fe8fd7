// Dedup.Session against the real dedupd: every operation kind over one
// stream, answers in any order (a waiting Begin holds back no other),
// per-operation errors as answers, the protocol errors that end a stream
// (too many in flight, a duplicate id, an empty or oversized frame) after
// what is in flight is answered, timeout_ms, authentication at the start
// and permission per operation, a client that cancels mid-flight, SIGTERM.
#include <signal.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/auth_fixture.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/http_get.h"
#include "tests/testing/server_process.h"

namespace dedup::testing {
namespace {

using v1::SessionAnswer;
using v1::SessionOp;
using v1::SessionRequest;
using v1::SessionResponse;

constexpr int kMaxItems = 8;  // --max_batch_items below
constexpr uint32_t kMaxInFlight = 4 * kMaxItems;

// A synchronous client of one stream.
class Stream {
 public:
  explicit Stream(v1::Dedup::Stub* stub, const std::string& token = "") {
    SetDeadline(&ctx_, 30000);
    if (!token.empty()) ctx_.AddMetadata("authorization", "Bearer " + token);
    stream_ = stub->Session(&ctx_);
  }
  // Reads the first frame; 0 when the stream ended instead.
  uint32_t Start() {
    SessionResponse first;
    if (!stream_->Read(&first)) return 0;
    EXPECT_EQ(first.answers_size(), 0);
    return first.max_in_flight();
  }
  bool Send(std::vector<SessionOp> ops) {
    SessionRequest frame;
    for (SessionOp& op : ops) *frame.add_ops() = std::move(op);
    return stream_->Write(frame);
  }
  // Reads frames until `n` answers came (or the stream ended); by id.
  std::map<uint64_t, SessionAnswer> Read(int n, int* frames = nullptr) {
    std::map<uint64_t, SessionAnswer> answers;
    SessionResponse frame;
    while (static_cast<int>(answers.size()) < n && stream_->Read(&frame)) {
      if (frames != nullptr) ++*frames;
      for (const SessionAnswer& a : frame.answers()) {
        EXPECT_TRUE(answers.emplace(a.id(), a).second) << "twice: " << a.id();
      }
    }
    return answers;
  }
  // Half-closes, then returns the stream's status.
  grpc::Status Close() {
    stream_->WritesDone();
    return End();
  }
  // The stream's status, reading (and dropping) what is left.
  grpc::Status End() {
    SessionResponse ignored;
    while (stream_->Read(&ignored)) {
    }
    return stream_->Finish();
  }
  grpc::ClientContext* context() { return &ctx_; }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<SessionRequest, SessionResponse>>
      stream_;
};

SessionOp BeginOp(uint64_t id, const std::string& ns, const std::string& key,
                  const std::string& owner, uint32_t wait_ms = 0) {
  SessionOp op;
  op.set_id(id);
  v1::BeginRequest* b = op.mutable_begin();
  b->set_namespace_(ns);
  b->set_key(key);
  b->set_owner(owner);
  b->set_args_hash("args-hash");  // as TestClient::BeginReq
  b->set_wait_ms(wait_ms);
  return op;
}

SessionOp CompleteOp(uint64_t id, const std::string& ns, const std::string& key,
                     uint64_t fence, const std::string& result) {
  SessionOp op;
  op.set_id(id);
  v1::CompleteRequest* c = op.mutable_complete();
  c->set_namespace_(ns);
  c->set_key(key);
  c->set_fence(fence);
  c->set_outcome(v1::SUCCESS);
  c->set_result(result);
  return op;
}

class SessionTest : public SharedServerTest<SessionTest> {
 public:
  static std::vector<std::string> Flags() {
    return {"--durability=sync", "--max_batch_items=8",
            "--metrics_address=127.0.0.1:0"};
  }

 protected:
  const std::string& ns() { return client().ns(); }
  // The value of `series` on the server's /metrics page; -1 if absent.
  double Metric(const std::string& series) {
    return ScrapeSample(server().metrics_port(), series).value_or(-1);
  }
  // Polls Metric(series) for up to 5 s until it is `want`.
  bool MetricBecomes(const std::string& series, double want) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (Metric(series) != want) {
      if (std::chrono::steady_clock::now() > end) return false;
      SleepMs(20);
    }
    return true;
  }
  // A key held by another owner (a unary Begin), for waiting Begins.
  std::string HeldKey(const std::string& suffix) {
    const std::string key = TestKey(suffix);
    EXPECT_EQ(client().Begin(key, "holder").status(),
              v1::BeginResponse::STARTED);
    return key;
  }
};

TEST_F(SessionTest, EveryKindOfOperationIsAnswered) {
  Stream s(client().stub());
  EXPECT_EQ(s.Start(), kMaxInFlight);
  const std::string a = TestKey("a"), b = TestKey("b");
  ASSERT_TRUE(s.Send({BeginOp(1, ns(), a, "o"), BeginOp(2, ns(), b, "o")}));
  auto answers = s.Read(2);
  ASSERT_EQ(answers.size(), 2u);
  ASSERT_TRUE(answers[1].has_begin()) << answers[1].DebugString();
  EXPECT_EQ(answers[1].begin().status(), v1::BeginResponse::STARTED);
  EXPECT_EQ(answers[2].begin().status(), v1::BeginResponse::STARTED);
  const uint64_t fa = answers[1].begin().fence();
  const uint64_t fb = answers[2].begin().fence();

  SessionOp renew, checkpoint, release, get;
  renew.set_id(4);
  renew.mutable_renew()->set_namespace_(ns());
  renew.mutable_renew()->set_key(b);
  renew.mutable_renew()->set_fence(fb);
  checkpoint.set_id(5);
  checkpoint.mutable_checkpoint()->set_namespace_(ns());
  checkpoint.mutable_checkpoint()->set_key(b);
  checkpoint.mutable_checkpoint()->set_fence(fb);
  checkpoint.mutable_checkpoint()->set_step("one");
  checkpoint.mutable_checkpoint()->set_data("half");
  ASSERT_TRUE(
      s.Send({CompleteOp(3, ns(), a, fa, "result-a"), renew, checkpoint}));
  answers = s.Read(3);
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_EQ(answers[3].complete().status(), v1::CompleteResponse::OK)
      << answers[3].DebugString();
  EXPECT_EQ(answers[4].renew().status(), v1::RenewResponse::OK)
      << answers[4].DebugString();
  EXPECT_TRUE(answers[5].has_checkpoint()) << answers[5].DebugString();

  release.set_id(6);
  release.mutable_release()->set_namespace_(ns());
  release.mutable_release()->set_key(b);
  release.mutable_release()->set_fence(fb);
  get.set_id(7);
  get.mutable_get()->set_namespace_(ns());
  get.mutable_get()->set_key(a);
  ASSERT_TRUE(s.Send({release, get, BeginOp(8, ns(), a, "other")}));
  answers = s.Read(3);
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_EQ(answers[6].release().status(), v1::ReleaseResponse::OK)
      << answers[6].DebugString();
  ASSERT_TRUE(answers[7].get().found()) << answers[7].DebugString();
  EXPECT_EQ(answers[7].get().record().result(), "result-a");
  EXPECT_EQ(answers[8].begin().status(), v1::BeginResponse::DUPLICATE);
  EXPECT_EQ(answers[8].begin().result(), "result-a");
  EXPECT_TRUE(s.Close().ok());
  // Written for good: a unary call sees the same.
  EXPECT_EQ(client().Begin(a, "third").status(), v1::BeginResponse::DUPLICATE);
}

// Answers of several frames ready together never make one frame larger
// than --max_batch_response_bytes (one answer at least), so a client with
// gRPC's default 4 MiB receive limit reads them all: 16 DUPLICATEs of a
// 900 KB result, three per frame sent (the rest ask again).
TEST_F(SessionTest, AnswerFramesStayWithinTheResponseBudget) {
  const std::string key = TestKey("big");
  const std::string result(900 * 1000, 'r');
  const v1::BeginResponse owned = client().Begin(key, "o");
  ASSERT_EQ(owned.status(), v1::BeginResponse::STARTED);
  ASSERT_EQ(client().Complete(key, owned.fence(), result).status(),
            v1::CompleteResponse::OK);
  Stream s(client().stub());
  ASSERT_EQ(s.Start(), kMaxInFlight);
  uint64_t id = 0;
  for (int frame = 0; frame < 4; ++frame) {
    std::vector<SessionOp> ops;
    for (int i = 0; i < 4; ++i) {
      ++id;
      ops.push_back(BeginOp(id, ns(), key, absl::StrCat("reader-", id)));
    }
    ASSERT_TRUE(s.Send(std::move(ops)));
  }
  int frames = 0;
  const auto answers = s.Read(16, &frames);
  ASSERT_EQ(answers.size(), 16u)
      << "the stream ended: " << s.End().error_message();
  int duplicates = 0;
  for (const auto& [answer_id, answer] : answers) {
    if (answer.has_begin()) {
      EXPECT_EQ(answer.begin().status(), v1::BeginResponse::DUPLICATE);
      ++duplicates;
    } else {
      EXPECT_EQ(answer.error().reason(), "RESULT_BUDGET") << answer_id;
    }
  }
  EXPECT_GE(duplicates, 4);
  EXPECT_TRUE(s.Close().ok());
}

TEST_F(SessionTest, BadOperationsAreAnsweredAndTheStreamGoesOn) {
  Stream s(client().stub());
  ASSERT_EQ(s.Start(), kMaxInFlight);
  SessionOp unset;
  unset.set_id(2);
  ASSERT_TRUE(s.Send({BeginOp(1, ns(), "", "o"), unset,
                      BeginOp(3, ns(), TestKey("ok"), "o")}));
  auto answers = s.Read(3);
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_EQ(answers[1].error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(answers[1].error().message(), "key"))
      << answers[1].error().message();
  EXPECT_EQ(answers[2].error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(answers[2].error().message(), "op: not set");
  EXPECT_EQ(answers[3].begin().status(), v1::BeginResponse::STARTED);
  // The ids are free again.
  ASSERT_TRUE(s.Send({BeginOp(1, ns(), TestKey("again"), "o")}));
  EXPECT_EQ(s.Read(1)[1].begin().status(), v1::BeginResponse::STARTED);
  EXPECT_TRUE(s.Close().ok());
}

TEST_F(SessionTest, AWaitingBeginHoldsBackNoOtherAnswer) {
  const std::string held = HeldKey("held");
  Stream s(client().stub());
  ASSERT_EQ(s.Start(), kMaxInFlight);
  ASSERT_TRUE(s.Send({BeginOp(1, ns(), held, "waiter", /*wait_ms=*/10000),
                      BeginOp(2, ns(), TestKey("free"), "o")}));
  auto first = s.Read(1);
  ASSERT_EQ(first.count(2), 1u) << "the free key's answer came after";
  EXPECT_EQ(first.count(1), 0u);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(client()
                .Complete(held, client().Get(held).record().fence(), "r")
                .status(),
            v1::CompleteResponse::OK);
  auto second = s.Read(1);
  EXPECT_EQ(second[1].begin().status(), v1::BeginResponse::DUPLICATE);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(s.Close().ok());
}

TEST_F(SessionTest, TimeoutBoundsAWaitingBegin) {
  const std::string held = HeldKey("held");
  Stream s(client().stub());
  ASSERT_EQ(s.Start(), kMaxInFlight);
  SessionOp op = BeginOp(1, ns(), held, "waiter", /*wait_ms=*/20000);
  op.set_timeout_ms(300);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(s.Send({op}));
  auto answers = s.Read(1);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(answers.size(), 1u);
  // IN_USE just before the timeout (actionable) or DEADLINE_EXCEEDED at it.
  if (answers[1].has_error()) {
    EXPECT_EQ(answers[1].error().code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  } else {
    EXPECT_EQ(answers[1].begin().status(), v1::BeginResponse::IN_USE);
  }
  EXPECT_GE(took, std::chrono::milliseconds(200));
  EXPECT_LT(took, std::chrono::seconds(3));
  EXPECT_TRUE(s.Close().ok());
}

TEST_F(SessionTest, ADuplicateIdInFlightEndsTheStreamAfterItsAnswers) {
  const std::string held = HeldKey("held");
  Stream s(client().stub());
  ASSERT_EQ(s.Start(), kMaxInFlight);
  ASSERT_TRUE(s.Send({BeginOp(7, ns(), held, "waiter", /*wait_ms=*/400)}));
  ASSERT_TRUE(s.Send({BeginOp(7, ns(), TestKey("other"), "o")}));
  auto answers = s.Read(1);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[7].begin().status(), v1::BeginResponse::IN_USE);
  const grpc::Status end = s.End();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(end.error_message(), "already in flight"))
      << end.error_message();
  // Refused before the store: the second key was never claimed.
  EXPECT_FALSE(client().Get(TestKey("other")).found());
}

TEST_F(SessionTest, EmptyAndOversizedFramesEndTheStream) {
  for (int n : {0, kMaxItems + 1}) {
    Stream s(client().stub());
    ASSERT_EQ(s.Start(), kMaxInFlight);
    std::vector<SessionOp> ops;
    for (int i = 0; i < n; ++i) {
      ops.push_back(BeginOp(i, ns(), TestKey(std::to_string(i)), "o"));
    }
    ASSERT_TRUE(s.Send(ops));
    const grpc::Status end = s.End();
    EXPECT_EQ(end.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << n;
    EXPECT_TRUE(absl::StrContains(end.error_message(), "1..8")) << n;
  }
  EXPECT_FALSE(client().Get(TestKey("0")).found());
}

TEST_F(SessionTest, ExceedingMaxInFlightEndsTheStreamAfterItsAnswers) {
  const std::string held = HeldKey("held");
  Stream s(client().stub());
  ASSERT_EQ(s.Start(), kMaxInFlight);
  uint64_t id = 0;
  for (uint32_t f = 0; f < kMaxInFlight / kMaxItems; ++f) {
    std::vector<SessionOp> ops;
    for (int i = 0; i < kMaxItems; ++i) {
      ops.push_back(BeginOp(++id, ns(), held, "waiter", /*wait_ms=*/600));
    }
    ASSERT_TRUE(s.Send(ops));
  }
  ASSERT_TRUE(s.Send({BeginOp(++id, ns(), TestKey("over"), "o")}));
  auto answers = s.Read(kMaxInFlight);
  EXPECT_EQ(answers.size(), kMaxInFlight);
  for (auto& [op_id, answer] : answers) {
    EXPECT_EQ(answer.begin().status(), v1::BeginResponse::IN_USE) << op_id;
  }
  EXPECT_EQ(s.End().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_FALSE(client().Get(TestKey("over")).found());
}

TEST_F(SessionTest, AClientThatCancelsMidFlightLeavesTheServerHealthy) {
  const std::string held = HeldKey("held");
  {
    Stream s(client().stub());
    ASSERT_EQ(s.Start(), kMaxInFlight);
    std::vector<SessionOp> ops;
    for (int i = 0; i < 4; ++i) {
      ops.push_back(BeginOp(i, ns(), TestKey(std::to_string(i)), "o"));
    }
    ops.push_back(BeginOp(9, ns(), held, "waiter", /*wait_ms=*/2000));
    ASSERT_TRUE(s.Send(ops));
    s.context()->TryCancel();
    EXPECT_EQ(s.End().error_code(), grpc::StatusCode::CANCELLED);
  }
  // The parked Begin is answered now, to a stream that is gone.
  EXPECT_EQ(client()
                .Complete(held, client().Get(held).record().fence(), "r")
                .status(),
            v1::CompleteResponse::OK);
  // Each operation took effect or did not: a retry with the same owner is
  // STARTED either way (the same claim again), never IN_USE.
  for (int i = 0; i < 4; ++i) {
    const auto r = client().Begin(TestKey(std::to_string(i)), "o");
    EXPECT_EQ(r.status(), v1::BeginResponse::STARTED) << r.DebugString();
  }
  Stream again(client().stub());
  EXPECT_EQ(again.Start(), kMaxInFlight);
  ASSERT_TRUE(again.Send({BeginOp(1, ns(), TestKey("after"), "o")}));
  EXPECT_EQ(again.Read(1)[1].begin().status(), v1::BeginResponse::STARTED);
  EXPECT_TRUE(again.Close().ok());
  // Every stream ended on the server too (the shared server runs one test
  // at a time).
  EXPECT_TRUE(MetricBecomes("dedup_session_streams_open", 0));
  EXPECT_GT(Metric(R"(dedup_session_ops_total{code="OK",kind="begin"})"), 0);
  EXPECT_GT(Metric(R"(dedup_session_frames_total{direction="in"})"), 0);
}

TEST(SessionStopTest, SigtermAnswersWhatIsInFlightThenEndsUnavailable) {
  DEDUP_START_SERVER(server, {"--durability=sync", "--lame_duck_ms=0"});
  TestClient client(server->address());
  const std::string held = TestKey("held");
  ASSERT_EQ(client.Begin(held, "holder").status(), v1::BeginResponse::STARTED);
  Stream s(client.stub());
  ASSERT_GT(s.Start(), 0u);
  ASSERT_TRUE(s.Send({BeginOp(1, client.ns(), held, "waiter", 20000)}));
  SleepMs(200);  // parked
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(server->pid(), SIGTERM), 0);
  auto answers = s.Read(1);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[1].begin().status(), v1::BeginResponse::IN_USE);
  const grpc::Status end = s.End();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::UNAVAILABLE)
      << end.error_message();
  client.Disconnect();
  EXPECT_TRUE(server->WaitForExit(std::chrono::seconds(10)));
  EXPECT_EQ(server->exit_code(), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(AuthTest, SessionAuthenticatesOnceAndAuthorizesEachOperation) {
  DEDUP_START_SERVER(server, {"--tenants_file=" + tenants_file_});
  auto stub = v1::Dedup::NewStub(grpc::CreateChannel(
      server->address(), grpc::InsecureChannelCredentials()));
  {
    Stream refused(stub.get());
    EXPECT_EQ(refused.Start(), 0u);
    EXPECT_EQ(refused.End().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  Stream s(stub.get(), kBillingToken);
  ASSERT_GT(s.Start(), 0u);
  ASSERT_TRUE(s.Send({BeginOp(1, "billing:inv", "k", "o"),
                      BeginOp(2, "shipping:x", "k", "o")}));
  auto answers = s.Read(2);
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[1].begin().status(), v1::BeginResponse::STARTED);
  EXPECT_EQ(answers[2].error().code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(s.Close().ok());
}

// A frame over the tenant's rate is answered per operation, each refusal
// saying when to send it again (ItemError.retry_after_ms, as the RetryInfo
// of a unary call), and the stream goes on.
TEST_F(AuthTest, SessionOperationsOverTheRateSayWhenToRetry) {
  WriteFileAtomically(tenants_file_,
                      WithLimitedTenant(StandardTenantsJson(), "burst",
                                        "burst-token", R"({"rps": 20})"));
  DEDUP_START_SERVER(server, {"--tenants_file=" + tenants_file_});
  auto stub = v1::Dedup::NewStub(grpc::CreateChannel(
      server->address(), grpc::InsecureChannelCredentials()));
  Stream s(stub.get(), "burst-token");
  ASSERT_GT(s.Start(), 0u);
  // 60 operations, then 60 more: the first frame spends the burst (one
  // frame's worth), the second comes before the bucket refills.
  auto frame = [](uint64_t first) {
    std::vector<SessionOp> ops;
    for (uint64_t id = first; id < first + 60; ++id) {
      ops.push_back(BeginOp(id, "burst:x", TestKey(std::to_string(id)), "o"));
    }
    return ops;
  };
  ASSERT_TRUE(s.Send(frame(1)));
  auto admitted = s.Read(60);
  ASSERT_EQ(admitted.size(), 60u);
  EXPECT_EQ(admitted[1].begin().status(), v1::BeginResponse::STARTED)
      << admitted[1].error().message();
  ASSERT_TRUE(s.Send(frame(101)));
  auto answers = s.Read(60);
  ASSERT_EQ(answers.size(), 60u);
  for (const auto& [id, answer] : answers) {
    ASSERT_TRUE(answer.has_error()) << id;
    EXPECT_EQ(answer.error().code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << answer.error().message();
    // 60 operations at 20 per second: at most 3 s to wait.
    EXPECT_GT(answer.error().retry_after_ms(), 0u) << answer.error().message();
    EXPECT_LE(answer.error().retry_after_ms(), 3000u);
  }
  absl::SleepFor(absl::Milliseconds(200));  // a few tokens back
  // The stream goes on: a frame within the rate is served.
  ASSERT_TRUE(s.Send({BeginOp(200, "burst:x", TestKey("within"), "o")}));
  auto later = s.Read(1);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[200].begin().status(), v1::BeginResponse::STARTED)
      << later[200].error().message();
  EXPECT_TRUE(s.Close().ok());
}

}  // namespace
}  // namespace dedup::testing
