// Leases against the real server: takeover after expiry, stale fences, the
// fence (not the clock) deciding ownership, and Renew.

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace dedup::testing {
namespace {

using v1::BeginResponse;
using v1::CompleteResponse;
using v1::ReleaseResponse;
using v1::RenewResponse;

class LeaseTest : public SharedServerTest<LeaseTest> {
 public:
  static std::vector<std::string> Flags() { return {"--durability=none"}; }
};

// Claims `key` for `owner` with the minimum lease and waits until it ran out.
uint64_t BeginAndLetLeaseExpire(TestClient& c, const std::string& key,
                                const std::string& owner) {
  v1::BeginRequest req = c.BeginReq(key, owner);
  req.set_lease_ms(100);
  const BeginResponse r = c.Begin(req);
  EXPECT_EQ(r.status(), BeginResponse::STARTED);
  EXPECT_GT(r.lease_expires_at(), 0);
  // Sleep past the lease as the server's clock (shared with ours) sees it.
  SleepMs(std::max<int64_t>(r.lease_expires_at() - NowMs(), 0) + 50);
  return r.fence();
}

TEST_F(LeaseTest, TakeoverAfterExpiryFencesOutTheStaleOwner) {
  const std::string key = TestKey("k");
  const uint64_t f1 = BeginAndLetLeaseExpire(client(), key, "stale");

  const BeginResponse taken = client().Begin(key, "new");
  EXPECT_EQ(taken.status(), BeginResponse::STARTED);
  EXPECT_TRUE(taken.takeover());
  EXPECT_GT(taken.fence(), f1);
  EXPECT_EQ(taken.attempts(), 2u);
  const uint64_t f2 = taken.fence();

  // The stale owner learns it lost the lease, on every call that needs it.
  const CompleteResponse stale_complete =
      client().Complete(key, f1, "stale-result");
  EXPECT_EQ(stale_complete.status(), CompleteResponse::STALE_FENCE);
  EXPECT_EQ(stale_complete.fence(), f2);
  const ReleaseResponse stale_release = client().Release(key, f1);
  EXPECT_EQ(stale_release.status(), ReleaseResponse::STALE_FENCE);
  EXPECT_EQ(stale_release.fence(), f2);
  const RenewResponse stale_renew = client().Renew(key, f1, 5000);
  EXPECT_EQ(stale_renew.status(), RenewResponse::STALE_FENCE);
  EXPECT_EQ(stale_renew.fence(), f2);

  // Its Begin again under the old owner id is not re-entry any more.
  const BeginResponse stale_again = client().Begin(key, "stale");
  EXPECT_EQ(stale_again.status(), BeginResponse::IN_USE);
  EXPECT_EQ(stale_again.fence(), f2);

  // Nothing of the stale owner's was stored.
  const v1::GetResponse got = client().Get(key);
  ASSERT_TRUE(got.found());
  EXPECT_EQ(got.record().state(), v1::IN_FLIGHT);
  EXPECT_EQ(got.record().fence(), f2);
  EXPECT_EQ(got.record().owner(), "new");
  EXPECT_EQ(got.record().outcome(), v1::OUTCOME_UNSPECIFIED);
  EXPECT_EQ(got.record().result(), "");
  EXPECT_EQ(got.record().attempts(), 2u);

  EXPECT_EQ(client().Complete(key, f2, "new-result").status(),
            CompleteResponse::OK);
  const BeginResponse dup = client().Begin(key, "third");
  EXPECT_EQ(dup.status(), BeginResponse::DUPLICATE);
  EXPECT_EQ(dup.result(), "new-result");
  EXPECT_EQ(dup.outcome(), v1::SUCCESS);
  EXPECT_EQ(dup.fence(), f2);
  EXPECT_EQ(dup.attempts(), 2u);

  // Late stale calls still cannot touch the completed record.
  EXPECT_EQ(client().Complete(key, f1, "stale-result").status(),
            CompleteResponse::STALE_FENCE);
  EXPECT_EQ(client().Begin(key, "fourth").result(), "new-result");
}

TEST_F(LeaseTest, CompleteAfterExpiryWithoutTakeoverSucceeds) {
  const std::string key = TestKey("k");
  const uint64_t fence = BeginAndLetLeaseExpire(client(), key, "slow");

  const CompleteResponse done = client().Complete(key, fence, "late-but-ok");
  EXPECT_EQ(done.status(), CompleteResponse::OK);
  EXPECT_EQ(done.fence(), fence);
  EXPECT_GT(done.expires_at(), NowMs());

  const BeginResponse dup = client().Begin(key, "other");
  EXPECT_EQ(dup.status(), BeginResponse::DUPLICATE);
  EXPECT_EQ(dup.result(), "late-but-ok");
  EXPECT_EQ(dup.fence(), fence);
  EXPECT_FALSE(dup.takeover());
}

TEST_F(LeaseTest, ReleaseAndRenewAfterExpiryWithoutTakeoverSucceed) {
  const std::string renewed = TestKey("renewed");
  const std::string released = TestKey("released");
  const uint64_t f_renew = BeginAndLetLeaseExpire(client(), renewed, "a");
  const uint64_t f_release = BeginAndLetLeaseExpire(client(), released, "a");

  const RenewResponse renew = client().Renew(renewed, f_renew, 5000);
  EXPECT_EQ(renew.status(), RenewResponse::OK);
  EXPECT_GT(renew.lease_expires_at(), NowMs() + 4000);
  // The renewed lease is live again: others must wait.
  EXPECT_EQ(client().Begin(renewed, "b").status(), BeginResponse::IN_USE);

  EXPECT_EQ(client().Release(released, f_release).status(),
            ReleaseResponse::OK);
  const BeginResponse fresh = client().Begin(released, "b");
  EXPECT_EQ(fresh.status(), BeginResponse::STARTED);
  EXPECT_FALSE(fresh.takeover());
  EXPECT_GT(fresh.fence(), f_release);
}

TEST_F(LeaseTest, RenewExtendsTheLease) {
  const std::string key = TestKey("k");
  v1::BeginRequest req = client().BeginReq(key, "a");
  req.set_lease_ms(300);
  const int64_t before_begin = NowMs();
  const BeginResponse r = client().Begin(req);
  ASSERT_EQ(r.status(), BeginResponse::STARTED);
  EXPECT_GE(r.lease_expires_at(), before_begin + 300);
  EXPECT_LE(r.lease_expires_at(), NowMs() + 300);
  EXPECT_GE(r.expires_at(), r.lease_expires_at());

  SleepMs(150);
  const int64_t before_renew = NowMs();
  const RenewResponse renew = client().Renew(key, r.fence(), 2000);
  const int64_t after_renew = NowMs();
  ASSERT_EQ(renew.status(), RenewResponse::OK);
  EXPECT_EQ(renew.fence(), r.fence());
  EXPECT_GT(renew.lease_expires_at(), r.lease_expires_at());
  EXPECT_GE(renew.lease_expires_at(), before_renew + 2000);
  EXPECT_LE(renew.lease_expires_at(), after_renew + 2000);
  EXPECT_GE(renew.expires_at(), renew.lease_expires_at());

  const v1::GetResponse got = client().Get(key);
  ASSERT_TRUE(got.found());
  EXPECT_EQ(got.record().lease_expires_at(), renew.lease_expires_at());

  // Past the original lease, the renewed one still holds off takeover.
  SleepMs(std::max<int64_t>(r.lease_expires_at() - NowMs(), 0) + 100);
  const BeginResponse other = client().Begin(key, "b");
  EXPECT_EQ(other.status(), BeginResponse::IN_USE);
  EXPECT_EQ(other.fence(), r.fence());
  EXPECT_EQ(other.lease_expires_at(), renew.lease_expires_at());
  EXPECT_GT(other.retry_after_ms(), 0u);
  // Time left on the lease, capped.
  EXPECT_LE(other.retry_after_ms(), renew.lease_expires_at() - NowMs() + 5);

  // lease_ms = 0 renews for the server default (60 s).
  const int64_t before_default = NowMs();
  const RenewResponse by_default = client().Renew(key, r.fence(), 0);
  const int64_t after_default = NowMs();
  ASSERT_EQ(by_default.status(), RenewResponse::OK);
  EXPECT_GE(by_default.lease_expires_at(), before_default + 60000);
  EXPECT_LE(by_default.lease_expires_at(), after_default + 60000);

  // The owner completes normally after renewing.
  EXPECT_EQ(client().Complete(key, r.fence(), "done").status(),
            CompleteResponse::OK);
  EXPECT_EQ(client().Renew(key, r.fence(), 1000).status(),
            RenewResponse::ALREADY_COMPLETED);
}

TEST_F(LeaseTest, RenewOnMissingKeyIsNotFound) {
  EXPECT_EQ(client().Renew(TestKey("never"), 1, 1000).status(),
            RenewResponse::NOT_FOUND);
}

}  // namespace
}  // namespace dedup::testing
