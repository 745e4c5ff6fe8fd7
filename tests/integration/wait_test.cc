// Begin with wait_ms: a caller blocked on an in-flight key is answered as
// soon as the owner completes or releases, or when the lease or wait ends.

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "dedup/v1/admin.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace dedup::testing {
namespace {

using v1::BeginResponse;
using v1::CompleteResponse;
using v1::ReleaseResponse;
using Clock = std::chrono::steady_clock;

class WaitTest : public SharedServerTest<WaitTest> {
 public:
  static std::vector<std::string> Flags() { return {"--durability=none"}; }
};

int64_t Ms(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

struct Waited {
  BeginResponse resp;
  Clock::time_point sent;
  Clock::time_point answered;
};

// Starts a waiting Begin on its own channel, so it cannot queue behind the
// main thread's calls.
std::future<Waited> BeginInBackground(const std::string& address,
                                      v1::BeginRequest req) {
  return std::async(std::launch::async, [address, req] {
    TestClient waiter(address);
    Waited w;
    w.sent = Clock::now();
    w.resp = waiter.Begin(req);
    w.answered = Clock::now();
    return w;
  });
}

// Returns once the server holds `count` parked Begins (its Stats say so),
// whatever time the waiters' new channels took to connect; false after 20 s.
// The suite's tests run one at a time on their server, so every parked Begin
// is the calling test's.
bool AwaitParkedBegins(const std::string& address, uint64_t count) {
  auto admin = v1::Admin::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < give_up) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 5'000);
    v1::StatsResponse stats;
    if (admin->Stats(&ctx, v1::StatsRequest(), &stats).ok() &&
        stats.waiting_begins() >= count) {
      return true;
    }
    SleepMs(5);
  }
  return false;
}

TEST_F(WaitTest, WaitersGetTheResultPromptlyAfterComplete) {
  const std::string key = TestKey("k");
  const BeginResponse owner = client().Begin(key, "owner");
  ASSERT_EQ(owner.status(), BeginResponse::STARTED);

  constexpr int kWaiters = 4;
  std::vector<std::future<Waited>> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    v1::BeginRequest req =
        client().BeginReq(key, "waiter-" + std::to_string(i));
    req.set_wait_ms(10000);
    waiters.push_back(BeginInBackground(server().address(), req));
  }
  ASSERT_TRUE(AwaitParkedBegins(server().address(), kWaiters));
  for (auto& w : waiters) {
    ASSERT_EQ(w.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
        << "a waiter was answered before the outcome existed";
  }

  const Clock::time_point complete_sent = Clock::now();
  ASSERT_EQ(client().Complete(key, owner.fence(), "the result").status(),
            CompleteResponse::OK);
  const Clock::time_point complete_answered = Clock::now();

  for (auto& f : waiters) {
    const Waited w = f.get();
    EXPECT_EQ(w.resp.status(), BeginResponse::DUPLICATE);
    EXPECT_EQ(w.resp.result(), "the result");
    EXPECT_EQ(w.resp.fence(), owner.fence());
    EXPECT_GE(w.answered, complete_sent);
    EXPECT_LT(Ms(w.answered - complete_answered), 50)
        << "waiter answered " << Ms(w.answered - complete_answered)
        << " ms after Complete's response";
  }
}

TEST_F(WaitTest, WaiterStartsAfterRelease) {
  const std::string key = TestKey("k");
  const BeginResponse owner = client().Begin(key, "owner");
  ASSERT_EQ(owner.status(), BeginResponse::STARTED);

  v1::BeginRequest req = client().BeginReq(key, "waiter");
  req.set_wait_ms(10000);
  std::future<Waited> waiter = BeginInBackground(server().address(), req);
  ASSERT_TRUE(AwaitParkedBegins(server().address(), 1));
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(0)),
            std::future_status::timeout);

  const Clock::time_point release_sent = Clock::now();
  ASSERT_EQ(client().Release(key, owner.fence()).status(), ReleaseResponse::OK);
  const Clock::time_point released = Clock::now();
  const Waited w = waiter.get();
  EXPECT_EQ(w.resp.status(), BeginResponse::STARTED);
  EXPECT_GT(w.resp.fence(), owner.fence());
  EXPECT_FALSE(w.resp.takeover());
  EXPECT_GE(w.answered, release_sent);
  EXPECT_LT(Ms(w.answered - released), 50);

  // The waiter now owns the key.
  const v1::GetResponse got = client().Get(key);
  ASSERT_TRUE(got.found());
  EXPECT_EQ(got.record().owner(), "waiter");
  EXPECT_EQ(got.record().fence(), w.resp.fence());
}

TEST_F(WaitTest, WaiterGetsInUseWhenTheWaitEnds) {
  const std::string key = TestKey("k");
  const BeginResponse owner = client().Begin(key, "owner");
  ASSERT_EQ(owner.status(), BeginResponse::STARTED);

  v1::BeginRequest req = client().BeginReq(key, "waiter");
  req.set_wait_ms(400);
  const Clock::time_point sent = Clock::now();
  const BeginResponse r = client().Begin(req);
  const int64_t waited = Ms(Clock::now() - sent);
  EXPECT_EQ(r.status(), BeginResponse::IN_USE);
  EXPECT_EQ(r.fence(), owner.fence());
  EXPECT_GT(r.retry_after_ms(), 0u);
  // Allow for the server rounding its deadline to whole milliseconds.
  EXPECT_GE(waited, 398);
  EXPECT_LT(waited, 400 + 300);
}

TEST_F(WaitTest, WaiterTakesOverWhenTheLeaseExpires) {
  const std::string key = TestKey("k");
  v1::BeginRequest owner_req = client().BeginReq(key, "owner");
  owner_req.set_lease_ms(400);
  const BeginResponse owner = client().Begin(owner_req);
  ASSERT_EQ(owner.status(), BeginResponse::STARTED);

  v1::BeginRequest req = client().BeginReq(key, "waiter");
  req.set_wait_ms(5000);
  const Clock::time_point sent = Clock::now();
  const BeginResponse r = client().Begin(req);
  const int64_t answered_at = NowMs();
  EXPECT_EQ(r.status(), BeginResponse::STARTED);
  EXPECT_TRUE(r.takeover());
  EXPECT_GT(r.fence(), owner.fence());
  EXPECT_EQ(r.attempts(), 2u);
  // Answered once the lease ran out, not at the end of the wait.
  EXPECT_GE(answered_at, owner.lease_expires_at());
  EXPECT_LT(answered_at, owner.lease_expires_at() + 300);
  EXPECT_LT(Ms(Clock::now() - sent), 1500);
}

TEST_F(WaitTest, WaitingOnAFreeOrFinishedKeyAnswersAtOnce) {
  const std::string key = TestKey("k");
  v1::BeginRequest req = client().BeginReq(key, "a");
  req.set_wait_ms(5000);
  Clock::time_point sent = Clock::now();
  const BeginResponse r = client().Begin(req);
  EXPECT_EQ(r.status(), BeginResponse::STARTED);
  EXPECT_LT(Ms(Clock::now() - sent), 1000);

  // Re-entry by the same owner does not wait on itself.
  sent = Clock::now();
  EXPECT_EQ(client().Begin(req).status(), BeginResponse::STARTED);
  EXPECT_LT(Ms(Clock::now() - sent), 1000);

  ASSERT_EQ(client().Complete(key, r.fence(), "done").status(),
            CompleteResponse::OK);
  req.set_owner("b");
  sent = Clock::now();
  EXPECT_EQ(client().Begin(req).status(), BeginResponse::DUPLICATE);
  EXPECT_LT(Ms(Clock::now() - sent), 1000);
}

}  // namespace
}  // namespace dedup::testing
