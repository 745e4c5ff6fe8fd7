// GroupRouter: each operation reaches the hosted store of the group owning
// its key's slot; others are refused with the not_hosted answer.
#include "replication/group_router.h"

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "storage/storage_key.h"
#include "tests/unit/inert_store.h"

namespace dedup {
namespace {

// Records the keys it was given and answers each at once.
class RecordingStore final : public Store {
 public:
  std::vector<std::string> keys;
  int begin_many_calls = 0;
  int closes = 0;

  void Begin(std::string, std::string key, BeginParams, int64_t,
             StoreCallback<BeginResult> done) override {
    keys.push_back(key);
    std::move(done)(BeginResult());
  }
  void Complete(std::string, std::string key, CompleteParams,
                StoreCallback<FencedDecision> done) override {
    keys.push_back(key);
    std::move(done)(FencedDecision());
  }
  void Release(std::string, std::string key, uint64_t,
               StoreCallback<FencedDecision> done) override {
    keys.push_back(key);
    std::move(done)(FencedDecision());
  }
  void Renew(std::string, std::string key, uint64_t, int64_t,
             StoreCallback<FencedDecision> done) override {
    keys.push_back(key);
    std::move(done)(FencedDecision());
  }
  void Checkpoint(std::string, std::string key, CheckpointParams,
                  StoreCallback<FencedDecision> done) override {
    keys.push_back(key);
    std::move(done)(FencedDecision());
  }
  void BeginMany(std::vector<BeginCall> calls) override {
    ++begin_many_calls;
    for (BeginCall& call : calls) {
      keys.push_back(call.key);
      std::move(call.done)(BeginResult());
    }
  }
  void CompleteMany(std::vector<CompleteCall> calls) override {
    for (CompleteCall& call : calls) {
      keys.push_back(call.key);
      std::move(call.done)(FencedDecision());
    }
  }
  void Get(std::string, std::string key,
           StoreCallback<std::optional<Record>> done) override {
    keys.push_back(key);
    std::move(done)(std::optional<Record>());
  }
  void Forget(std::string, std::string key, StoreCallback<bool> done) override {
    keys.push_back(key);
    std::move(done)(true);
  }
  void DrainWaiters() override {}
  absl::Status Close() override {
    ++closes;
    return absl::OkStatus();
  }
  absl::Status CompactAll() override { return absl::OkStatus(); }
  StoreStats Stats() override {
    StoreStats stats;
    stats.estimated_records = keys.size();
    return stats;
  }
  absl::StatusOr<uint64_t> CountStoredRecords() override { return keys.size(); }
};

constexpr char kNs[] = "router";

absl::Status NotHosted(uint32_t group) {
  absl::Status status =
      absl::UnavailableError(absl::StrCat("no replica of group ", group));
  status.SetPayload(kLeaderAddressPayload,
                    absl::Cord(absl::StrCat("10.0.0.", group, ":1")));
  return status;
}

class GroupRouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ShardLayout> layout = FoundingLayout({1, 2, 3}, 4, 3);
    ASSERT_TRUE(layout.ok()) << layout.status();
    GroupRouter::Options options;
    options.layout = *layout;
    options.hosted = {{0, &group0_}, {2, &group2_}};
    options.not_hosted = NotHosted;
    absl::StatusOr<std::unique_ptr<GroupRouter>> router =
        GroupRouter::Create(std::move(options));
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
  }

  static std::string Key(int i) { return absl::StrCat("key-", i); }
  uint32_t GroupOf(const std::string& key) const {
    return SlotOf(kNs, key) * 4 / kSlotCount;
  }

  RecordingStore group0_;
  RecordingStore group2_;
  std::unique_ptr<GroupRouter> router_;
};

TEST_F(GroupRouterTest, EachKeyReachesTheStoreOfItsSlotsGroup) {
  std::map<uint32_t, std::vector<std::string>> expected;
  std::map<uint32_t, int> refused;
  for (int i = 0; i < 400; ++i) {
    const std::string key = Key(i);
    EXPECT_EQ(router_->GroupOf(kNs, key), GroupOf(key));
    router_->Begin(
        kNs, key, BeginParams(), 0, [&, key](absl::StatusOr<BeginResult> r) {
          if (r.ok()) return;
          EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
          auto hint = r.status().GetPayload(kLeaderAddressPayload);
          ASSERT_TRUE(hint.has_value());
          EXPECT_EQ(std::string(*hint),
                    absl::StrCat("10.0.0.", GroupOf(key), ":1"));
          ++refused[GroupOf(key)];
        });
    expected[GroupOf(key)].push_back(key);
  }
  EXPECT_EQ(group0_.keys, expected[0]);
  EXPECT_EQ(group2_.keys, expected[2]);
  EXPECT_EQ(refused[1], static_cast<int>(expected[1].size()));
  EXPECT_EQ(refused[3], static_cast<int>(expected[3].size()));
  EXPECT_EQ(refused.count(0) + refused.count(2), 0u);
  EXPECT_GT(expected[1].size(), 50u);  // every group got a share
}

TEST_F(GroupRouterTest, EveryOperationKindIsRouted) {
  std::string in0, in1;  // keys of group 0 (hosted) and 1 (not)
  for (int i = 0; in0.empty() || in1.empty(); ++i) {
    if (GroupOf(Key(i)) == 0 && in0.empty()) in0 = Key(i);
    if (GroupOf(Key(i)) == 1 && in1.empty()) in1 = Key(i);
  }
  int refused = 0;
  auto fenced = [&](absl::StatusOr<FencedDecision> r) { refused += !r.ok(); };
  for (const std::string& key : {in0, in1}) {
    router_->Complete(kNs, key, CompleteParams(), fenced);
    router_->Release(kNs, key, 1, fenced);
    router_->Renew(kNs, key, 1, 1000, fenced);
    router_->Checkpoint(kNs, key, CheckpointParams(), fenced);
    router_->Get(kNs, key, [&](absl::StatusOr<std::optional<Record>> r) {
      refused += !r.ok();
    });
    router_->Forget(kNs, key,
                    [&](absl::StatusOr<bool> r) { refused += !r.ok(); });
  }
  EXPECT_EQ(group0_.keys, std::vector<std::string>(6, in0));
  EXPECT_TRUE(group2_.keys.empty());
  EXPECT_EQ(refused, 6);  // every operation on in1's group 1
}

TEST_F(GroupRouterTest, BatchesAreSplitOneCallPerGroupAndAnsweredPerItem) {
  std::vector<Store::BeginCall> calls;
  std::vector<int> answered(300, 0);
  std::map<uint32_t, size_t> per_group;
  for (int i = 0; i < 300; ++i) {
    Store::BeginCall call;
    call.ns = kNs;
    call.key = Key(i);
    ++per_group[GroupOf(call.key)];
    const bool hosted = GroupOf(call.key) % 2 == 0;
    call.done = [&answered, i, hosted](absl::StatusOr<BeginResult> r) {
      EXPECT_EQ(r.ok(), hosted) << i;
      ++answered[i];
    };
    calls.push_back(std::move(call));
  }
  router_->BeginMany(std::move(calls));
  EXPECT_EQ(answered, std::vector<int>(300, 1));
  EXPECT_EQ(group0_.begin_many_calls, 1);
  EXPECT_EQ(group2_.begin_many_calls, 1);
  EXPECT_EQ(group0_.keys.size(), per_group[0]);
  EXPECT_EQ(group2_.keys.size(), per_group[2]);
}

TEST_F(GroupRouterTest, CloseRefusesLaterCallsAndLeavesTheStoresOpen) {
  EXPECT_TRUE(router_->CheckServing().ok());
  ASSERT_TRUE(router_->Close().ok());
  EXPECT_EQ(router_->CheckServing().code(), absl::StatusCode::kUnavailable);
  absl::Status seen;
  router_->Get(kNs, Key(0), [&](absl::StatusOr<std::optional<Record>> r) {
    seen = r.status();
  });
  EXPECT_EQ(seen.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(group0_.keys.empty() && group2_.keys.empty());
  EXPECT_EQ(group0_.closes + group2_.closes, 0);
}

TEST_F(GroupRouterTest, StatsAndCountsSumTheHostedGroups) {
  for (int i = 0; i < 100; ++i) {
    router_->Begin(kNs, Key(i), BeginParams(), 0,
                   [](absl::StatusOr<BeginResult>) {});
  }
  const uint64_t hosted = group0_.keys.size() + group2_.keys.size();
  EXPECT_EQ(router_->Stats().estimated_records, hosted);
  absl::StatusOr<uint64_t> count = router_->CountStoredRecords();
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, hosted);
}

// A key of `group` (4 groups).
std::string KeyOfGroup(uint32_t group) {
  for (int i = 0;; ++i) {
    const std::string key = absl::StrCat("key-", i);
    if (SlotOf(kNs, key) * 4 / kSlotCount == group) return key;
  }
}

TEST_F(GroupRouterTest, AGroupAddedWhileServingIsRoutedToFromThenOn) {
  const std::string key = KeyOfGroup(1);
  int refused = 0;
  auto get = [&] {
    router_->Get(kNs, key, [&](absl::StatusOr<std::optional<Record>> r) {
      refused += !r.ok();
    });
  };
  get();
  EXPECT_EQ(refused, 1);
  RecordingStore group1;
  ASSERT_TRUE(router_->AddHosted(1, &group1).ok());
  get();
  EXPECT_EQ(refused, 1);
  EXPECT_EQ(group1.keys, std::vector<std::string>{key});
  EXPECT_EQ(router_->HostedGroups(), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(router_->AddHosted(1, &group1).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(router_->AddHosted(9, &group1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(router_->AddHosted(3, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(router_->Stats().estimated_records, 1u);  // summed over 0, 1, 2
}

TEST_F(GroupRouterTest, ARemovedGroupIsRefusedAndItsStoreLeftAlone) {
  const std::string key = KeyOfGroup(2);
  ASSERT_TRUE(router_->RemoveHosted(2, absl::Seconds(1)).ok());
  absl::Status seen;
  router_->Complete(
      kNs, key, CompleteParams(),
      [&](absl::StatusOr<FencedDecision> r) { seen = r.status(); });
  EXPECT_EQ(seen.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(seen.GetPayload(kLeaderAddressPayload).has_value());
  EXPECT_TRUE(group2_.keys.empty());
  EXPECT_EQ(group2_.closes, 0);
  EXPECT_EQ(router_->HostedGroups(), std::vector<uint32_t>{0});
  EXPECT_EQ(router_->RemoveHosted(2, absl::Seconds(1)).code(),
            absl::StatusCode::kNotFound);
}

// Takes a Begin only once released: an operation still handing work over.
class SlowStore final : public testing::InertStoreOf<Store> {
 public:
  absl::Notification entered;
  absl::Notification release;
  void Begin(std::string, std::string, BeginParams, int64_t,
             StoreCallback<BeginResult> done) override {
    entered.Notify();
    release.WaitForNotification();
    std::move(done)(BeginResult());
  }
};

TEST_F(GroupRouterTest, RemovalWaitsForOperationsStillHandingWorkOver) {
  SlowStore slow;
  ASSERT_TRUE(router_->AddHosted(3, &slow).ok());
  bool answered = false;
  std::thread caller([&] {
    router_->Begin(kNs, KeyOfGroup(3), BeginParams(), 0,
                   [&](absl::StatusOr<BeginResult> r) { answered = r.ok(); });
  });
  slow.entered.WaitForNotification();
  EXPECT_EQ(router_->RemoveHosted(3, absl::Milliseconds(50)).code(),
            absl::StatusCode::kDeadlineExceeded);
  // Removed all the same: new operations are refused at once.
  absl::Status seen;
  router_->Get(
      kNs, KeyOfGroup(3),
      [&](absl::StatusOr<std::optional<Record>> r) { seen = r.status(); });
  EXPECT_EQ(seen.code(), absl::StatusCode::kUnavailable);
  slow.release.Notify();
  caller.join();
  EXPECT_TRUE(answered);
}

TEST_F(GroupRouterTest, RemovalReturnsOnceTheLastOldRouteEnds) {
  SlowStore slow;
  ASSERT_TRUE(router_->AddHosted(3, &slow).ok());
  std::thread caller([&] {
    router_->Begin(kNs, KeyOfGroup(3), BeginParams(), 0,
                   [](absl::StatusOr<BeginResult>) {});
  });
  slow.entered.WaitForNotification();
  std::thread releaser([&] {
    absl::SleepFor(absl::Milliseconds(100));
    slow.release.Notify();
  });
  const absl::Time start = absl::Now();
  EXPECT_TRUE(router_->RemoveHosted(3, absl::Seconds(10)).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(80));
  caller.join();
  releaser.join();
}

TEST(GroupRouterCreateTest, RefusesAHostedGroupOutsideTheLayout) {
  absl::StatusOr<ShardLayout> layout = FoundingLayout({1, 2, 3}, 2, 3);
  ASSERT_TRUE(layout.ok());
  RecordingStore store;
  GroupRouter::Options options;
  options.layout = *layout;
  options.hosted = {{7, &store}};
  options.not_hosted = NotHosted;
  EXPECT_EQ(GroupRouter::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.hosted = {{1, &store}};
  options.not_hosted = nullptr;
  EXPECT_EQ(GroupRouter::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dedup
