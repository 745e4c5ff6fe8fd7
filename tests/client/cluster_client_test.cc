// The C++ client and dedupctl against a real 3-node dedupd group on loopback
// (tests/cluster/cluster_harness.h): leader following, fail-over after the
// leader is killed, and the cluster commands.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/coalescing_client.h"
#include "client/dedup_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/client/run_ctl.h"
#include "tests/cluster/cluster_harness.h"

namespace dedup {
namespace {

using ::dedup::testing::ClusterHarness;
using ::dedup::testing::CtlResult;
using ::dedup::testing::Field;
using ::dedup::testing::RunCtl;

// One row of `dedupctl cluster status`, by column name.
using StatusRow = std::map<std::string, std::string>;

std::vector<StatusRow> ParseStatusTable(const std::string& out) {
  std::vector<StatusRow> rows;
  std::vector<std::string> header;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> cells =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (header.empty()) {
      header = cells;
      continue;
    }
    StatusRow row;
    for (size_t c = 0; c < cells.size() && c < header.size(); ++c) {
      row[header[c]] = cells[c];
    }
    rows.push_back(row);
  }
  return rows;
}

std::vector<StatusRow> Leaders(const std::vector<StatusRow>& rows) {
  std::vector<StatusRow> leaders;
  for (const StatusRow& row : rows) {
    if (row.at("ROLE") == "leader") leaders.push_back(row);
  }
  return leaders;
}

class ClusterClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartAll().ok());
    absl::StatusOr<int> leader = cluster_.WaitForLeader();
    ASSERT_TRUE(leader.ok()) << leader.status();
    leader_ = *leader;
    follower_ = leader_ % 3 + 1;
  }

  // Every node, a follower first, so the first call must be redirected.
  std::vector<std::string> AllAddresses() const {
    return {cluster_.client_address(follower_),
            cluster_.client_address(follower_ % 3 + 1),
            cluster_.client_address(leader_)};
  }

  std::string AddressFlag(const std::vector<std::string>& addresses) const {
    return absl::StrCat("--address=", absl::StrJoin(addresses, ","));
  }

  // Waits until some node reports itself leader with a leader id other than
  // `not_id` (0: any); returns the id.
  int WaitForLeaderOtherThan(int not_id) {
    const absl::Time deadline = absl::Now() + absl::Seconds(15);
    while (absl::Now() < deadline) {
      for (int id = 1; id <= 3; ++id) {
        if (!cluster_.running(id) || id == not_id) continue;
        auto status = cluster_.Status(id);
        if (status.ok() && status->role() == "leader") return id;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return 0;
  }

  ClusterHarness cluster_;
  int leader_ = 0;
  int follower_ = 0;
};

TEST_F(ClusterClientTest, ClientWithEveryAddressFollowsTheLeader) {
  Client client(AllAddresses());
  BeginOptions owner;
  owner.owner = "itest-owner";
  absl::StatusOr<v1::BeginResponse> begin =
      client.Begin("cc", "k1", "args", owner);
  ASSERT_TRUE(begin.ok()) << begin.status();
  ASSERT_EQ(begin->status(), v1::BeginResponse::STARTED);
  absl::StatusOr<v1::CompleteResponse> complete =
      client.Complete("cc", "k1", begin->fence(), v1::SUCCESS, "done");
  ASSERT_TRUE(complete.ok()) << complete.status();
  EXPECT_EQ(complete->status(), v1::CompleteResponse::OK);
  absl::StatusOr<v1::BeginResponse> again = client.Begin("cc", "k1", "args");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->status(), v1::BeginResponse::DUPLICATE);
  EXPECT_EQ(again->result(), "done");

  // Only the leader answers: a client of a lone follower gets there too.
  Client via_follower(cluster_.client_address(follower_));
  absl::StatusOr<v1::GetResponse> got = via_follower.Get("cc", "k1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->found());
}

TEST_F(ClusterClientTest, SameClientCarriesOnAfterTheLeaderIsKilled) {
  ClientOptions options;
  // Enough retries to ride out an election (timeouts 0.5-1 s).
  options.max_attempts = 12;
  options.backoff = {absl::Milliseconds(50), absl::Milliseconds(500)};
  Client client(AllAddresses(), options);
  CoalescingOptions coalescing_options;
  coalescing_options.rpc = options;
  CoalescingClient coalescing(AllAddresses(), coalescing_options);

  BeginOptions owner;
  owner.owner = "before-kill";
  absl::StatusOr<v1::BeginResponse> begin =
      client.Begin("cc", "survivor", "args", owner);
  ASSERT_TRUE(begin.ok()) << begin.status();
  ASSERT_TRUE(
      client.Complete("cc", "survivor", begin->fence(), v1::SUCCESS, "kept")
          .ok());
  BeginBatchItem warmup{"cc", "warm", "args", "warm-owner"};
  ASSERT_TRUE(coalescing.Begin(warmup).ok());

  cluster_.Kill(leader_);
  const absl::Time killed = absl::Now();
  owner.owner = "after-kill";
  absl::StatusOr<v1::BeginResponse> after =
      client.Begin("cc", "after", "args", owner);
  const absl::Duration took = absl::Now() - killed;
  ASSERT_TRUE(after.ok()) << after.status() << " after " << took;
  EXPECT_EQ(after->status(), v1::BeginResponse::STARTED);
  EXPECT_LT(took, absl::Seconds(8));

  absl::StatusOr<v1::BeginResponse> replay =
      client.Begin("cc", "survivor", "args");
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(replay->status(), v1::BeginResponse::DUPLICATE);
  EXPECT_EQ(replay->result(), "kept");

  BeginBatchItem batched{"cc", "batched-after", "args", "batch-owner"};
  absl::StatusOr<v1::BeginResponse> coalesced = coalescing.Begin(batched);
  ASSERT_TRUE(coalesced.ok()) << coalesced.status();
  EXPECT_EQ(coalesced->status(), v1::BeginResponse::STARTED);
}

TEST_F(ClusterClientTest, CtlClusterStatusShowsEveryNodeAndOneLeader) {
  for (const std::vector<std::string>& addresses :
       {AllAddresses(),
        // One node: the others are found through its member list.
        std::vector<std::string>{cluster_.client_address(follower_)}}) {
    CtlResult status = RunCtl({AddressFlag(addresses), "cluster", "status"});
    ASSERT_EQ(status.exit_code, 0) << status.err << status.out;
    EXPECT_EQ(status.err, "");
    const std::vector<StatusRow> rows = ParseStatusTable(status.out);
    ASSERT_EQ(rows.size(), 3u) << status.out;
    const std::vector<StatusRow> leaders = Leaders(rows);
    ASSERT_EQ(leaders.size(), 1u) << status.out;
    EXPECT_EQ(leaders[0].at("ID"), std::to_string(leader_));
    EXPECT_EQ(leaders[0].at("ADDRESS"), cluster_.client_address(leader_));
    EXPECT_EQ(leaders[0].at("LAG"), "0") << status.out;
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(rows[i].at("ID"), std::to_string(i + 1)) << status.out;
      EXPECT_EQ(rows[i].at("LEADER"), std::to_string(leader_)) << status.out;
      EXPECT_NE(rows[i].at("MATCH"), "-") << status.out;
    }
  }
}

TEST_F(ClusterClientTest, CtlClusterStatusMarksAKilledNodeUnreachable) {
  const int victim = follower_;
  cluster_.Kill(victim);
  CtlResult status = RunCtl({AddressFlag(AllAddresses()), "cluster", "status"});
  EXPECT_EQ(status.exit_code, 2) << status.err;
  EXPECT_THAT(status.err,
              ::testing::HasSubstr(cluster_.client_address(victim)));
  const std::vector<StatusRow> rows = ParseStatusTable(status.out);
  ASSERT_EQ(rows.size(), 3u) << status.out;
  EXPECT_EQ(Leaders(rows).size(), 1u) << status.out;
  const StatusRow& row = rows[victim - 1];  // Rows are in id order.
  EXPECT_EQ(row.at("ID"), std::to_string(victim)) << status.out;
  EXPECT_EQ(row.at("ROLE"), "unreachable") << status.out;
  EXPECT_EQ(row.at("ADDRESS"), cluster_.client_address(victim));
}

// `cluster recover` refuses a group with a leader, and for a lost one
// names a node whose log holds everything acknowledged.
TEST_F(ClusterClientTest, CtlClusterRecoverOnlyForALostGroup) {
  CtlResult alive = RunCtl({AddressFlag(AllAddresses()), "cluster", "recover"});
  EXPECT_EQ(alive.exit_code, 3) << alive.out << alive.err;
  EXPECT_THAT(alive.out, ::testing::HasSubstr("the group is not lost"));

  const int behind = follower_;
  const int ahead = 6 - leader_ - behind;
  ASSERT_TRUE(cluster_.Stop(behind).ok());
  Client client({cluster_.client_address(leader_)});
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(client.Begin("cc", absl::StrCat("lost-", i), "args").ok());
  }
  cluster_.Kill(leader_);
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (absl::Now() < deadline) {
    auto status = cluster_.Status(ahead);
    if (status.ok() && status->leader_id() == 0) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  CtlResult lost = RunCtl({AddressFlag(AllAddresses()), "cluster", "recover"});
  EXPECT_EQ(lost.exit_code, 0) << lost.out << lost.err;
  EXPECT_THAT(lost.out, ::testing::HasSubstr(absl::StrCat(
                            "Most up-to-date reachable node: ", ahead, " at ",
                            cluster_.client_address(ahead))));
  const std::vector<StatusRow> rows = ParseStatusTable(lost.out);
  ASSERT_GE(rows.size(), 3u) << lost.out;
  EXPECT_NE(rows[ahead - 1].at("LOG_TERM"), "0") << lost.out;
  EXPECT_NE(rows[ahead - 1].at("LOG_INDEX"), "0") << lost.out;

  // The same advice in JSON.
  CtlResult json =
      RunCtl({AddressFlag(AllAddresses()), "-o", "json", "cluster", "recover"});
  EXPECT_EQ(json.exit_code, 0) << json.out << json.err;
  const nlohmann::json advice = nlohmann::json::parse(json.out).at("recovery");
  EXPECT_EQ(advice.at("groupLost"), true) << json.out;
  EXPECT_EQ(advice.at("recoverFrom").at("nodeId"), std::to_string(ahead));
  EXPECT_EQ(advice.at("recoverFrom").at("address"),
            cluster_.client_address(ahead));
  EXPECT_NE(advice.at("recoverFrom").at("lastIndex"), "0") << json.out;
}

TEST_F(ClusterClientTest, CtlTransferMovesLeadership) {
  const int target = follower_ % 3 + 1;
  // Sent to a follower on purpose: transfer must reach the leader.
  CtlResult transfer =
      RunCtl({AddressFlag({cluster_.client_address(follower_)}), "cluster",
              "transfer", std::to_string(target)});
  ASSERT_EQ(transfer.exit_code, 0) << transfer.err;
  EXPECT_EQ(Field(transfer.out, "leader_id"), std::to_string(target));

  // Every node agrees once the new leader's first heartbeat arrived.
  std::vector<StatusRow> rows;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  bool agreed = false;
  while (!agreed && absl::Now() < deadline) {
    CtlResult status =
        RunCtl({AddressFlag(AllAddresses()), "cluster", "status"});
    rows = ParseStatusTable(status.out);
    agreed = status.exit_code == 0 && rows.size() == 3;
    for (const StatusRow& row : rows) {
      agreed = agreed && row.at("LEADER") == std::to_string(target);
    }
    if (!agreed) absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(agreed);
  const std::vector<StatusRow> leaders = Leaders(rows);
  ASSERT_EQ(leaders.size(), 1u);
  EXPECT_EQ(leaders[0].at("ID"), std::to_string(target));

  // Without an ID: any up-to-date voter other than the leader.
  CtlResult any = RunCtl({AddressFlag(AllAddresses()), "cluster", "transfer"});
  ASSERT_EQ(any.exit_code, 0) << any.err;
  EXPECT_NE(Field(any.out, "leader_id"), std::to_string(target)) << any.out;
}

TEST_F(ClusterClientTest, CtlWithoutFollowingActsOnlyOnTheGivenNode) {
  absl::StatusOr<v1::ClusterStatusResponse> before = cluster_.Status(leader_);
  ASSERT_TRUE(before.ok()) << before.status();
  // As a stop hook uses it: on a follower, transfer must change nothing.
  CtlResult on_follower =
      RunCtl({AddressFlag({cluster_.client_address(follower_)}),
              "--follow_leader=false", "cluster", "transfer"});
  EXPECT_EQ(on_follower.exit_code, 2) << on_follower.out;
  EXPECT_THAT(on_follower.err, ::testing::HasSubstr("UNAVAILABLE"));
  absl::StatusOr<v1::ClusterStatusResponse> status = cluster_.Status(leader_);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->role(), "leader");
  EXPECT_EQ(status->leader_changes(), before->leader_changes());

  CtlResult on_leader =
      RunCtl({AddressFlag({cluster_.client_address(leader_)}),
              "--follow_leader=false", "cluster", "transfer"});
  ASSERT_EQ(on_leader.exit_code, 0) << on_leader.err;
  EXPECT_NE(Field(on_leader.out, "leader_id"), std::to_string(leader_));
}

TEST_F(ClusterClientTest, CtlBeginThroughAFollowerReachesTheLeader) {
  CtlResult begin =
      RunCtl({AddressFlag({cluster_.client_address(follower_)}), "begin", "cc",
              "ctl-key", "--owner=ctl-owner", "--args_hash_hex=0a0b"});
  ASSERT_EQ(begin.exit_code, 0) << begin.err;
  EXPECT_EQ(Field(begin.out, "status"), "STARTED");
  uint64_t fence = 0;
  ASSERT_TRUE(absl::SimpleAtoi(Field(begin.out, "fence"), &fence));

  // Same owner again, through the other follower: re-entrant, same fence.
  const int other = follower_ % 3 + 1;
  CtlResult again =
      RunCtl({AddressFlag({cluster_.client_address(other)}), "begin", "cc",
              "ctl-key", "--owner=ctl-owner", "--args_hash_hex=0a0b"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(Field(again.out, "status"), "STARTED");
  EXPECT_EQ(Field(again.out, "fence"), std::to_string(fence));

  CtlResult complete = RunCtl({AddressFlag(AllAddresses()), "complete", "cc",
                               "ctl-key", std::to_string(fence)});
  ASSERT_EQ(complete.exit_code, 0) << complete.err;
  EXPECT_EQ(Field(complete.out, "status"), "OK");
}

TEST_F(ClusterClientTest, CtlRemoveShrinksTheGroup) {
  const int removed = follower_;
  CtlResult remove = RunCtl({AddressFlag(AllAddresses()), "cluster", "remove",
                             std::to_string(removed)});
  ASSERT_EQ(remove.exit_code, 0) << remove.err;
  EXPECT_EQ(Field(remove.out, "removed"), std::to_string(removed));

  absl::StatusOr<v1::ClusterStatusResponse> status = cluster_.Status(leader_);
  ASSERT_TRUE(status.ok()) << status.status();
  for (const v1::ClusterMember& member : status->members()) {
    EXPECT_NE(member.id(), static_cast<uint64_t>(removed));
  }
  // The two left still make a majority of the new group.
  cluster_.Kill(removed);
  Client client(AllAddresses());
  BeginOptions owner;
  owner.owner = "after-remove";
  absl::StatusOr<v1::BeginResponse> begin =
      client.Begin("cc", "after-remove", "args", owner);
  ASSERT_TRUE(begin.ok()) << begin.status();
  EXPECT_EQ(begin->status(), v1::BeginResponse::STARTED);
}

// Every cluster command with -o json: one JSON document on stdout whose node
// statuses are ClusterStatusResponse in the proto JSON mapping; a node that
// does not answer is an "error" entry and one error object on stderr.
TEST_F(ClusterClientTest, CtlClusterCommandsInJson) {
  using json = nlohmann::json;
  auto ctl = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {AddressFlag(AllAddresses()), "-o", "json"});
    return RunCtl(args);
  };
  CtlResult status = ctl({"cluster", "status"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_EQ(status.err, "");
  json doc = json::parse(status.out);
  ASSERT_EQ(doc.at("nodes").size(), 3u) << status.out;
  int leaders = 0;
  for (size_t i = 0; i < 3; ++i) {
    const json& node = doc.at("nodes")[i];
    EXPECT_EQ(node.at("nodeId"), std::to_string(i + 1));
    EXPECT_EQ(node.at("address"), cluster_.client_address(i + 1));
    const json& s = node.at("status");
    EXPECT_EQ(s.at("nodeId"), std::to_string(i + 1));
    EXPECT_EQ(s.at("leaderId"), std::to_string(leader_));
    EXPECT_EQ(s.at("members").size(), 3u);
    if (s.at("role") == "leader") ++leaders;
  }
  EXPECT_EQ(leaders, 1);

  CtlResult recover = ctl({"cluster", "recover"});
  EXPECT_EQ(recover.exit_code, 3) << recover.err;
  doc = json::parse(recover.out);
  EXPECT_EQ(doc.at("nodes").size(), 3u);
  EXPECT_EQ(doc.at("recovery").at("groupLost"), false);
  EXPECT_EQ(doc.at("recovery").at("leaderId"), std::to_string(leader_));

  const int target = follower_;
  CtlResult transfer = ctl({"cluster", "transfer", std::to_string(target)});
  ASSERT_EQ(transfer.exit_code, 0) << transfer.err;
  EXPECT_EQ(json::parse(transfer.out),
            json({{"leaderId", std::to_string(target)}}));

  const int removed = leader_;  // no longer the leader
  CtlResult remove = ctl({"cluster", "remove", std::to_string(removed)});
  ASSERT_EQ(remove.exit_code, 0) << remove.err;
  EXPECT_EQ(json::parse(remove.out),
            json({{"removed",
                   {{"nodeId", std::to_string(removed)}, {"groupId", 0}}}}));
  cluster_.Kill(removed);

  const int joiner = cluster_.AddJoiner();
  ASSERT_TRUE(cluster_.Start(joiner).ok());
  CtlResult add =
      ctl({"cluster", "add", std::to_string(joiner),
           cluster_.raft_address(joiner), cluster_.client_address(joiner)});
  ASSERT_EQ(add.exit_code, 0) << add.err;
  EXPECT_EQ(json::parse(add.out),
            json({{"added",
                   {{"nodeId", std::to_string(joiner)},
                    {"groupId", 0},
                    {"raftAddress", cluster_.raft_address(joiner)},
                    {"clientAddress", cluster_.client_address(joiner)}}}}));

  // The removed node's address is still in --address: it does not answer.
  CtlResult partial = ctl({"cluster", "status"});
  EXPECT_EQ(partial.exit_code, 2);
  const json error = json::parse(partial.err);
  EXPECT_EQ(error.at("error").at("code"), "UNAVAILABLE") << partial.err;
  EXPECT_THAT(error.at("error").at("message").get<std::string>(),
              ::testing::HasSubstr(cluster_.client_address(removed)));
  doc = json::parse(partial.out);
  int answered = 0;
  int failed = 0;
  for (const json& node : doc.at("nodes")) {
    if (node.contains("status")) ++answered;
    if (node.contains("error")) {
      ++failed;
      EXPECT_EQ(node.at("address"), cluster_.client_address(removed));
      EXPECT_EQ(node.at("error").at("code"), "UNAVAILABLE");
    }
  }
  EXPECT_EQ(answered, 3) << partial.out;
  EXPECT_EQ(failed, 1) << partial.out;
}

}  // namespace
}  // namespace dedup
