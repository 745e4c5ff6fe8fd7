// Smart routing (client/shard_router.h) of Client and CoalescingClient
// against a made-up sharded cluster (fake_shard_cluster.h): each call goes
// to its key's group's leader, batches split per group, the map is fetched
// again when an answer's epoch is newer (at most once a second), leader
// hints move a group, and without a map everything works as before. On
// Session streams: a redirect goes where it names, calls queued before the
// map use it on their next attempt, and a redirect outside the group
// refetches the map.
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "client/coalescing_client.h"
#include "client/dedup_client.h"
#include "common/slot.h"
#include "gtest/gtest.h"
#include "tests/client/fake_shard_cluster.h"

namespace dedup {
namespace {

using testing::FakeShardNode;
using testing::FakeShardState;
using testing::MakeShardMap;

constexpr char kNs[] = "ns";

// The n-th key (from 0) whose slot is in `group` of `groups` equal ranges.
std::string KeyIn(int group, int groups, int n = 0,
                  const std::string& prefix = "key-") {
  for (int i = 0;; ++i) {
    std::string key = prefix + std::to_string(i);
    if (static_cast<int>(SlotOf(kNs, key) * groups / kSlotCount) == group &&
        n-- == 0) {
      return key;
    }
  }
}

// Sends every item at once (BeginAsync) and waits for all the answers, in
// the items' order.
std::vector<absl::StatusOr<v1::BeginResponse>> BeginAll(
    CoalescingClient& client, const std::vector<BeginBatchItem>& items) {
  std::vector<absl::StatusOr<v1::BeginResponse>> answers(
      items.size(), absl::UnknownError("none"));
  absl::BlockingCounter left(static_cast<int>(items.size()));
  for (size_t i = 0; i < items.size(); ++i) {
    client.BeginAsync(items[i], [&, i](absl::StatusOr<v1::BeginResponse> a) {
      answers[i] = std::move(a);
      left.DecrementCount();
    });
  }
  left.Wait();
  return answers;
}

// Nodes A, B, C; group 0 = {A, C} led by A, group 1 = {B, C} led by B.
// Clients are given C only, so a call C gets was not routed.
class ShardRoutingTest : public ::testing::Test {
 protected:
  ShardRoutingTest() {
    for (int i = 0; i < 3; ++i) {
      nodes_.push_back(std::make_unique<FakeShardNode>(state_, true));
      addresses_.push_back(nodes_.back()->address());
    }
    state_->SetMap(MakeShardMap(1, addresses_, {{0, 2}, {1, 2}}));
  }

  // The nodes that got a call for `key`, in order.
  std::vector<std::string> NodesFor(const std::string& key) const {
    std::vector<std::string> out;
    for (const auto& call : state_->calls()) {
      if (call.key == key) out.push_back(call.node);
    }
    return out;
  }
  int CallsAt(int node) const {
    int n = 0;
    for (const auto& call : state_->calls()) n += call.node == addresses_[node];
    return n;
  }

  const std::string& A() const { return addresses_[0]; }
  const std::string& B() const { return addresses_[1]; }
  const std::string& C() const { return addresses_[2]; }

  std::shared_ptr<FakeShardState> state_ = std::make_shared<FakeShardState>();
  std::vector<std::unique_ptr<FakeShardNode>> nodes_;
  std::vector<std::string> addresses_;
};

TEST_F(ShardRoutingTest, EachCallGoesToItsGroupsLeader) {
  Client client(C());
  for (int n = 0; n < 3; ++n) {
    const std::string k0 = KeyIn(0, 2, n), k1 = KeyIn(1, 2, n);
    auto got0 = client.Get(kNs, k0);
    auto got1 = client.Get(kNs, k1);
    ASSERT_TRUE(got0.ok() && got1.ok());
    EXPECT_EQ(got0->record().result(), A());
    EXPECT_EQ(got1->record().result(), B());
  }
  EXPECT_EQ(CallsAt(2), 0);
  EXPECT_EQ(state_->map_fetches(), 1);
}

TEST_F(ShardRoutingTest, SingleNodeWithoutShardMapWorksAsBefore) {
  auto single_state = std::make_shared<FakeShardState>();
  FakeShardNode single(single_state, /*serve_cluster=*/false);
  Client client(single.address());
  const absl::Time start = absl::Now();
  auto got = client.Get(kNs, KeyIn(1, 2));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->record().result(), single.address());
  // The UNIMPLEMENTED answer ends the fetch: the call does not wait the
  // longest a first call waits for the map (1 s).
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(800));
}

TEST_F(ShardRoutingTest, InvalidMapIsIgnored) {
  v1::ShardMapResponse map = MakeShardMap(1, addresses_, {{0, 2}, {1, 2}});
  map.mutable_groups(1)->set_first_slot(9000);  // a gap
  state_->SetMap(map);
  Client client(C());
  auto got = client.Get(kNs, KeyIn(0, 2));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->record().result(), C());
}

TEST_F(ShardRoutingTest, BatchesSplitPerGroupAndMergeInOrder) {
  Client client(C());
  std::vector<BeginBatchItem> items;
  for (int n = 0; n < 10; ++n) {
    BeginBatchItem item;
    item.ns = kNs;
    item.key = KeyIn(n % 3 == 0 ? 1 : 0, 2, n);
    item.owner = "o";
    items.push_back(item);
  }
  auto answers = client.BeginBatch(items);
  ASSERT_TRUE(answers.ok()) << answers.status();
  ASSERT_EQ(answers->size(), items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    ASSERT_TRUE((*answers)[i].ok());
    const std::string& leader = i % 3 == 0 ? B() : A();
    EXPECT_EQ((*answers)[i]->result(), leader + " " + items[i].key) << i;
    EXPECT_EQ(NodesFor(items[i].key), std::vector<std::string>{leader});
  }

  std::vector<CompleteBatchItem> completes;
  for (int n = 0; n < 4; ++n) {
    CompleteBatchItem item;
    item.ns = kNs;
    item.key = KeyIn(n % 2, 2, 20 + n);
    item.fence = 100 + n;
    completes.push_back(item);
  }
  auto done = client.CompleteBatch(completes);
  ASSERT_TRUE(done.ok()) << done.status();
  for (size_t i = 0; i < completes.size(); ++i) {
    ASSERT_TRUE((*done)[i].ok());
    EXPECT_EQ((*done)[i]->fence(), completes[i].fence);
    EXPECT_EQ(NodesFor(completes[i].key),
              std::vector<std::string>{i % 2 == 0 ? A() : B()});
  }
  EXPECT_EQ(CallsAt(2), 0);
}

// An item error names the item by its place in the caller's batch, not in
// its group's RPC.
TEST_F(ShardRoutingTest, SplitBatchItemErrorsKeepTheCallersNumbering) {
  Client client(C());
  std::vector<BeginBatchItem> items = {
      {kNs, KeyIn(0, 2, 0), "", "o"},
      {kNs, KeyIn(1, 2, 0), "", "o"},
      {kNs, KeyIn(1, 2, 0, "bad-"), "", "o"},  // group 1's item 1
      {kNs, KeyIn(0, 2, 0, "bad-"), "", "o"},  // group 0's item 1
  };
  auto answers = client.BeginBatch(items);
  ASSERT_TRUE(answers.ok()) << answers.status();
  EXPECT_TRUE((*answers)[0].ok());
  EXPECT_TRUE((*answers)[1].ok());
  EXPECT_EQ((*answers)[2].status().message(), "items[2].key: bad");
  EXPECT_EQ((*answers)[3].status().message(), "items[3].key: bad");
}

// Groups are independent: one group's RPC refused fails its items only;
// every group's refused fails the call.
TEST_F(ShardRoutingTest, SplitBatchFailsAsAWholeOnlyWhenEveryGroupFails) {
  Client client(C());
  std::vector<BeginBatchItem> items = {
      {kNs, KeyIn(0, 2, 0), "", "o"},
      {kNs, KeyIn(1, 2, 0, "fail-"), "", "o"},
      {kNs, KeyIn(1, 2, 1), "", "o"},
  };
  auto answers = client.BeginBatch(items);
  ASSERT_TRUE(answers.ok()) << answers.status();
  EXPECT_TRUE((*answers)[0].ok());
  EXPECT_TRUE(absl::IsInvalidArgument((*answers)[1].status()));
  EXPECT_TRUE(absl::IsInvalidArgument((*answers)[2].status()));

  items[0].key = KeyIn(0, 2, 0, "fail-");
  answers = client.BeginBatch(items);
  EXPECT_TRUE(absl::IsInvalidArgument(answers.status())) << answers.status();
}

TEST_F(ShardRoutingTest, NewerEpochInAnAnswerRefetchesTheMap) {
  Client client(C());
  const std::string k0 = KeyIn(0, 2);
  ASSERT_TRUE(client.Get(kNs, k0).ok());
  // The groups move: group 0 is now led by B.
  state_->SetMap(MakeShardMap(2, addresses_, {{1, 2}, {0, 2}}));
  state_->SetTrailerEpoch(2);
  std::string last;
  for (absl::Time end = absl::Now() + absl::Seconds(5);
       absl::Now() < end && last != B();) {
    auto got = client.Get(kNs, k0);
    ASSERT_TRUE(got.ok());
    last = got->record().result();
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(last, B());
  EXPECT_EQ(state_->map_fetches(), 2);
}

// An epoch the nodes never catch up with (a map that does not say it) must
// not make every answer fetch the map.
TEST_F(ShardRoutingTest, RefetchesAtMostOncePerSecond) {
  Client client(C());
  state_->SetTrailerEpoch(7);
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Milliseconds(1500)) {
    ASSERT_TRUE(client.Get(kNs, KeyIn(0, 2)).ok());
  }
  absl::SleepFor(absl::Milliseconds(100));
  // The first fetch, then at most one per second after it.
  EXPECT_GE(state_->map_fetches(), 2);
  EXPECT_LE(state_->map_fetches(), 3);
}

TEST_F(ShardRoutingTest, LeaderHintOnAnAnswerMovesItsGroup) {
  Client client(C());
  const std::string k0 = KeyIn(0, 2), k1 = KeyIn(1, 2);
  nodes_[0]->SetLeaderHint(C());  // A forwarded the call to C
  ASSERT_EQ(client.Get(kNs, k0)->record().result(), A());
  nodes_[0]->SetLeaderHint("");
  EXPECT_EQ(client.Get(kNs, k0)->record().result(), C());
  // Only that group moved.
  EXPECT_EQ(client.Get(kNs, k1)->record().result(), B());
  // C is in the map: no fetch.
  EXPECT_EQ(state_->map_fetches(), 1);
}

TEST_F(ShardRoutingTest, LeaderHintOutsideTheMapRefetches) {
  Client client(C());
  const std::string k1 = KeyIn(1, 2);
  ASSERT_TRUE(client.Get(kNs, k1).ok());
  // Past the refresh interval of the first fetch.
  absl::SleepFor(absl::Milliseconds(1100));
  // A node the map does not hold leads group 1 now.
  FakeShardNode d(state_, true);
  nodes_[1]->SetLeaderHint(d.address());
  state_->SetMap(MakeShardMap(1, {A(), B(), C(), d.address()}, {{0, 2}, {3}}));
  ASSERT_TRUE(client.Get(kNs, k1).ok());
  nodes_[1]->SetLeaderHint("");
  for (absl::Time end = absl::Now() + absl::Seconds(5);
       absl::Now() < end && state_->map_fetches() < 2;) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(state_->map_fetches(), 2);
  EXPECT_EQ(client.Get(kNs, k1)->record().result(), d.address());
}

TEST_F(ShardRoutingTest, CoalescedCallsGoToTheirGroupsLeader) {
  CoalescingOptions options;
  options.max_batches_in_flight = 1;
  CoalescingClient client(std::vector<std::string>{C()}, options);
  BeginBatchItem first{kNs, KeyIn(0, 2, 0), "", "o"};
  auto answer = client.Begin(first);  // waits for the map
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->result(), A() + " " + first.key);

  constexpr int kCalls = 40;
  std::vector<BeginBatchItem> items;
  for (int n = 1; n <= kCalls; ++n) {
    items.push_back({kNs, KeyIn(n % 2, 2, n), "", "o"});
  }
  const std::vector<absl::StatusOr<v1::BeginResponse>> answers =
      BeginAll(client, items);
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(answers[i].ok()) << answers[i].status();
    const std::string& leader = (i + 1) % 2 == 0 ? A() : B();
    EXPECT_EQ(answers[i]->result(), leader + " " + items[i].key);
  }
  auto complete = client.Complete({kNs, KeyIn(1, 2, 50), 9});
  ASSERT_TRUE(complete.ok());
  auto checkpoint = client.Checkpoint({kNs, KeyIn(0, 2, 51), 9, "step"});
  ASSERT_TRUE(checkpoint.ok());
  EXPECT_EQ(NodesFor(KeyIn(1, 2, 50)), std::vector<std::string>{B()});
  EXPECT_EQ(NodesFor(KeyIn(0, 2, 51)), std::vector<std::string>{A()});
  EXPECT_EQ(CallsAt(2), 0);
}

// Calls on the Session stream sent before the map came go to the seed,
// which refuses each naming its group's leader: five groups led by five
// other nodes. Every redirect must reach the leader it names, although the
// calls of all groups move the one seed router back and forth: with a
// single attempt, none may fail.
TEST(ShardRoutingStreamTest, RedirectsBeforeTheMapReachTheNamedLeader) {
  constexpr int kGroups = 5;
  auto state = std::make_shared<FakeShardState>();
  std::vector<std::unique_ptr<FakeShardNode>> nodes;
  std::vector<std::string> addresses;
  for (int i = 0; i <= kGroups; ++i) {
    nodes.push_back(std::make_unique<FakeShardNode>(state, true));
    addresses.push_back(nodes.back()->address());
  }
  std::vector<std::vector<int>> replicas;
  for (int g = 0; g < kGroups; ++g) replicas.push_back({g, kGroups});
  state->SetMap(MakeShardMap(1, addresses, replicas));
  state->SetMapDelay(absl::Milliseconds(300));
  CoalescingOptions options;
  options.stream = true;
  options.rpc.max_attempts = 1;
  CoalescingClient client(std::vector<std::string>{addresses[kGroups]},
                          options);
  constexpr int kCalls = 100;
  std::vector<BeginBatchItem> items;
  for (int n = 0; n < kCalls; ++n) {
    items.push_back({kNs, KeyIn(n % kGroups, kGroups, n), "", "o"});
  }
  const std::vector<absl::StatusOr<v1::BeginResponse>> answers =
      BeginAll(client, items);
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(answers[i].ok()) << i << ": " << answers[i].status();
    EXPECT_EQ(answers[i]->result(),
              addresses[i % kGroups] + " " + items[i].key);
  }
}

// Without hints, a call queued before the map came is retried; once the
// map is there the retry goes to its group's leader, not to the seed again.
TEST_F(ShardRoutingTest, StreamCallsQueuedBeforeTheMapUseItOnRetry) {
  state_->SetMapDelay(absl::Milliseconds(200));
  for (auto& node : nodes_) node->SetSessionHints(false);
  CoalescingOptions options;
  options.stream = true;
  options.rpc.max_attempts = 30;
  options.rpc.backoff.base = absl::Milliseconds(20);
  options.rpc.backoff.cap = absl::Milliseconds(100);
  CoalescingClient client(std::vector<std::string>{C()}, options);
  constexpr int kCalls = 10;
  std::vector<BeginBatchItem> items;
  for (int n = 0; n < kCalls; ++n) {
    items.push_back({kNs, KeyIn(n % 2, 2, n), "", "o"});
  }
  const std::vector<absl::StatusOr<v1::BeginResponse>> answers =
      BeginAll(client, items);
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(answers[i].ok()) << i << ": " << answers[i].status();
    EXPECT_EQ(answers[i]->result(),
              (i % 2 == 0 ? A() : B()) + " " + items[i].key);
  }
}

// A stream refusal naming a leader the held map does not list for the
// group (the group moved) fetches the map again; later calls then go
// straight to the new leader.
TEST_F(ShardRoutingTest, StreamRedirectOutsideTheGroupRefetchesTheMap) {
  CoalescingOptions options;
  options.stream = true;
  options.rpc.max_attempts = 1;
  CoalescingClient client(std::vector<std::string>{C()}, options);
  const std::string first = KeyIn(0, 2, 0);
  auto answer = client.Begin({kNs, first, "", "o"});  // waits for the map
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->result(), A() + " " + first);
  ASSERT_EQ(state_->map_fetches(), 1);
  // Group 0 moves to {B, C}, led by B; refetches are at most once a second.
  state_->SetMap(MakeShardMap(2, addresses_, {{1, 2}, {1, 2}}));
  absl::SleepFor(absl::Milliseconds(1100));
  const std::string moved = KeyIn(0, 2, 1);
  answer = client.Begin({kNs, moved, "", "o"});
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->result(), B() + " " + moved);
  EXPECT_EQ(NodesFor(moved), (std::vector<std::string>{A(), B()}));
  for (int i = 0; i < 100 && state_->map_fetches() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(state_->map_fetches(), 2);
  absl::SleepFor(absl::Milliseconds(50));  // the new map installed
  const std::string later = KeyIn(0, 2, 2);
  answer = client.Begin({kNs, later, "", "o"});
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(NodesFor(later), std::vector<std::string>{B()});
}

}  // namespace
}  // namespace dedup
