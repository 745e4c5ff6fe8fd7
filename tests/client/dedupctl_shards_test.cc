// dedupctl cluster shards / cluster nodes (client/dedupctl_shards.h) against
// a made-up sharded cluster (fake_shard_cluster.h): the command line, the
// tables' shape and the JSON field names.
#include "client/dedupctl_shards.h"

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/dedupctl_cli.h"
#include "gtest/gtest.h"
#include "tests/client/fake_shard_cluster.h"

namespace dedup::ctl {
namespace {

using dedup::testing::FakeShardNode;
using dedup::testing::FakeShardState;
using dedup::testing::MakeShardMap;
using nlohmann::json;

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}
std::vector<std::string> Cells(const std::string& line) {
  return absl::StrSplit(line, ' ', absl::SkipEmpty());
}

v1::ClusterStatusResponse StatusWithLags(
    const std::vector<std::pair<uint64_t, uint64_t>>& lags) {
  v1::ClusterStatusResponse status;
  status.set_role("leader");
  for (const auto& [id, lag] : lags) {
    v1::ClusterMember* member = status.add_members();
    member->set_id(id);
    member->set_lag(lag);
    member->set_role("voter");
  }
  return status;
}

// Nodes 1, 2, 3 (A, B, C); group 0 = {1, 3} led by 1, group 1 = {2, 3} led
// by 2, epoch 4. dedupctl is given C only.
class DedupctlShardsTest : public ::testing::Test {
 protected:
  DedupctlShardsTest() {
    for (int i = 0; i < 3; ++i) {
      nodes_.push_back(std::make_unique<FakeShardNode>(state_, true));
      addresses_.push_back(nodes_.back()->address());
    }
    state_->SetMap(MakeShardMap(4, addresses_, {{0, 2}, {1, 2}}));
    nodes_[0]->SetStatus(0, StatusWithLags({{1, 0}, {3, 5}}));
    nodes_[1]->SetStatus(1, StatusWithLags({{2, 0}, {3, 7}}));
  }

  int Run(const std::string& sub, OutputFormat format) {
    absl::StatusOr<Invocation> inv = ParseInvocation({"cluster", sub}, {});
    EXPECT_TRUE(inv.ok()) << inv.status();
    inv->output = format;
    LeaderRouter router(std::vector<std::string>{addresses_[2]}, nullptr);
    out_.str("");
    err_.str("");
    return RunShardsCommand(router, ClientOptions(), *inv, out_, err_);
  }

  std::shared_ptr<FakeShardState> state_ = std::make_shared<FakeShardState>();
  std::vector<std::unique_ptr<FakeShardNode>> nodes_;
  std::vector<std::string> addresses_;
  std::ostringstream out_, err_;
};

TEST_F(DedupctlShardsTest, ParsesTheSubcommands) {
  EXPECT_EQ(ParseInvocation({"cluster", "shards"}, {})->command,
            Command::kClusterShards);
  EXPECT_EQ(ParseInvocation({"cluster", "nodes"}, {})->command,
            Command::kClusterNodes);
  EXPECT_FALSE(ParseInvocation({"cluster", "shards", "x"}, {}).ok());
  EXPECT_FALSE(ParseInvocation({"cluster", "nodes", "x"}, {}).ok());
}

TEST_F(DedupctlShardsTest, ShardsTable) {
  ASSERT_EQ(Run("shards", OutputFormat::kText), kExitOk) << err_.str();
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 4u) << out_.str();
  EXPECT_EQ(lines[0], "epoch: 4");
  EXPECT_EQ(Cells(lines[1]),
            (std::vector<std::string>{"GROUP", "SLOTS", "REPLICAS", "LEADER",
                                      "LEADER_ADDRESS"}));
  EXPECT_EQ(Cells(lines[2]), (std::vector<std::string>{"0", "[0,8192)", "1,3",
                                                       "1", addresses_[0]}));
  EXPECT_EQ(Cells(lines[3]),
            (std::vector<std::string>{"1", "[8192,16384)", "2,3", "2",
                                      addresses_[1]}));
  // Columns line up: every row's second cell starts where the header's does.
  EXPECT_EQ(lines[2].find('['), lines[1].find("SLOTS"));
}

TEST_F(DedupctlShardsTest, ShardsJsonHasTheProtoFieldNames) {
  ASSERT_EQ(Run("shards", OutputFormat::kJson), kExitOk) << err_.str();
  const json doc = json::parse(out_.str());
  EXPECT_EQ(doc.at("epoch"), "4");
  EXPECT_EQ(doc.at("slotCount"), 16384);
  ASSERT_EQ(doc.at("groups").size(), 2u);
  const json& g0 = doc["groups"][0];
  EXPECT_EQ(g0.at("groupId"), 0);
  EXPECT_EQ(g0.at("firstSlot"), 0);
  EXPECT_EQ(g0.at("endSlot"), 8192);
  EXPECT_EQ(g0.at("leaderNodeId"), "1");
  EXPECT_EQ(g0.at("leaderAddress"), addresses_[0]);
  EXPECT_EQ(g0.at("replicas")[1].at("nodeId"), "3");
  EXPECT_EQ(g0.at("replicas")[1].at("clientAddress"), addresses_[2]);
  EXPECT_EQ(doc["groups"][1].at("firstSlot"), 8192);
}

TEST_F(DedupctlShardsTest, NodesTable) {
  ASSERT_EQ(Run("nodes", OutputFormat::kText), kExitOk) << err_.str();
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 4u) << out_.str();
  EXPECT_EQ(Cells(lines[0]), (std::vector<std::string>{
                                 "NODE", "ADDRESS", "HOSTED", "LEADS", "LAG"}));
  EXPECT_EQ(Cells(lines[1]), (std::vector<std::string>{"1", addresses_[0], "0",
                                                       "0", "g0(n3=5)"}));
  EXPECT_EQ(Cells(lines[2]), (std::vector<std::string>{"2", addresses_[1], "1",
                                                       "1", "g1(n3=7)"}));
  EXPECT_EQ(Cells(lines[3]),
            (std::vector<std::string>{"3", addresses_[2], "0,1", "-", "-"}));
}

TEST_F(DedupctlShardsTest, NodesJson) {
  ASSERT_EQ(Run("nodes", OutputFormat::kJson), kExitOk) << err_.str();
  const json doc = json::parse(out_.str());
  EXPECT_EQ(doc.at("epoch"), "4");
  const json& nodes = doc.at("nodes");
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0].at("nodeId"), "1");
  EXPECT_EQ(nodes[0].at("clientAddress"), addresses_[0]);
  EXPECT_EQ(nodes[0].at("hostedGroups"), json::array({0}));
  const json& led = nodes[0].at("ledGroups");
  ASSERT_EQ(led.size(), 1u);
  EXPECT_EQ(led[0].at("groupId"), 0);
  EXPECT_EQ(led[0].at("members")[1].at("id"), "3");
  EXPECT_EQ(led[0].at("members")[1].at("lag"), "5");
  EXPECT_EQ(nodes[2].at("hostedGroups"), json::array({0, 1}));
  EXPECT_TRUE(nodes[2].at("ledGroups").empty());
}

TEST_F(DedupctlShardsTest, NodesReportsALeaderWithoutStatus) {
  nodes_[1]->SetStatus(1, {});
  state_->SetMap(MakeShardMap(4, addresses_, {{0, 2}, {1, 2}, {1, 0}}));
  ASSERT_EQ(Run("nodes", OutputFormat::kText), kExitRpcError);
  EXPECT_NE(out_.str().find("g2(unreachable)"), std::string::npos)
      << out_.str();
  EXPECT_NE(err_.str().find("group 2"), std::string::npos) << err_.str();
  ASSERT_EQ(Run("nodes", OutputFormat::kJson), kExitRpcError);
  const json doc = json::parse(out_.str());
  EXPECT_EQ(doc["nodes"][1]["ledGroups"][1].at("error").at("code"),
            "NOT_FOUND");
}

TEST_F(DedupctlShardsTest, SingleNodeIsAnError) {
  auto state = std::make_shared<FakeShardState>();
  FakeShardNode single(state, /*serve_cluster=*/false);
  LeaderRouter router(std::vector<std::string>{single.address()}, nullptr);
  Invocation inv = *ParseInvocation({"cluster", "shards"}, {});
  EXPECT_EQ(RunShardsCommand(router, ClientOptions(), inv, out_, err_),
            kExitRpcError);
  EXPECT_NE(err_.str().find("UNIMPLEMENTED"), std::string::npos) << err_.str();
}

}  // namespace
}  // namespace dedup::ctl
