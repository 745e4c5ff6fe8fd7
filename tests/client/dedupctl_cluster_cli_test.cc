// dedupctl's cluster commands: how their arguments and flags parse.
#include <string>
#include <vector>

#include "client/dedupctl_cli.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dedup::ctl {
namespace {

using ::testing::HasSubstr;

TEST(ParseInvocationTest, ClusterCommands) {
  absl::StatusOr<Invocation> status =
      ParseInvocation({"cluster", "status"}, {});
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->command, Command::kClusterStatus);

  absl::StatusOr<Invocation> add = ParseInvocation(
      {"cluster", "add", "4", "10.0.0.4:7001", "dedup-3:50051"}, {});
  ASSERT_TRUE(add.ok()) << add.status();
  EXPECT_EQ(add->command, Command::kClusterAdd);
  EXPECT_EQ(add->node_id, 4u);
  EXPECT_EQ(add->raft_address, "10.0.0.4:7001");
  EXPECT_EQ(add->client_address, "dedup-3:50051");

  absl::StatusOr<Invocation> remove =
      ParseInvocation({"cluster", "remove", "2"}, {});
  ASSERT_TRUE(remove.ok()) << remove.status();
  EXPECT_EQ(remove->command, Command::kClusterRemove);
  EXPECT_EQ(remove->node_id, 2u);

  absl::StatusOr<Invocation> any = ParseInvocation({"cluster", "transfer"}, {});
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ(any->command, Command::kClusterTransfer);
  EXPECT_EQ(any->node_id, 0u);
  absl::StatusOr<Invocation> to3 =
      ParseInvocation({"cluster", "transfer", "3"}, {});
  ASSERT_TRUE(to3.ok()) << to3.status();
  EXPECT_EQ(to3->node_id, 3u);
}

TEST(ParseInvocationTest, ClusterUsageErrors) {
  auto message = [](std::vector<std::string> args, CommandFlags flags = {}) {
    return std::string(ParseInvocation(args, flags).status().message());
  };
  EXPECT_THAT(message({"cluster"}), HasSubstr("takes a subcommand"));
  EXPECT_THAT(message({"cluster", "grow"}), HasSubstr("unknown cluster"));
  EXPECT_THAT(message({"cluster", "status", "x"}), HasSubstr("no arguments"));
  EXPECT_THAT(message({"cluster", "add", "4", "r:1"}),
              HasSubstr("ID RAFT_ADDR CLIENT_ADDR"));
  EXPECT_THAT(message({"cluster", "add", "0", "r:1", "c:1"}),
              HasSubstr("positive integer"));
  EXPECT_THAT(message({"cluster", "remove"}), HasSubstr("takes ID"));
  EXPECT_THAT(message({"cluster", "remove", "two"}),
              HasSubstr("positive integer"));
  EXPECT_THAT(message({"cluster", "transfer", "1", "2"}),
              HasSubstr("at most ID"));
  CommandFlags owner;
  owner.owner = "x";
  EXPECT_THAT(message({"cluster", "status"}, owner),
              HasSubstr("--owner does not apply to 'cluster'"));
}

TEST(ParseInvocationTest, ClusterMoveNeedsGroupFromAndTo) {
  CommandFlags flags;
  flags.group = 1;
  flags.from = 2;
  flags.to = 4;
  absl::StatusOr<Invocation> move = ParseInvocation({"cluster", "move"}, flags);
  ASSERT_TRUE(move.ok()) << move.status();
  EXPECT_EQ(move->command, Command::kClusterMove);
  EXPECT_EQ(move->group_id, 1u);
  EXPECT_EQ(move->from_node_id, 2u);
  EXPECT_EQ(move->to_node_id, 4u);
  auto message = [](std::vector<std::string> args, CommandFlags flags) {
    return std::string(ParseInvocation(args, flags).status().message());
  };
  CommandFlags no_to = flags;
  no_to.to.reset();
  EXPECT_THAT(message({"cluster", "move"}, no_to),
              HasSubstr("needs --group=G, --from=N and --to=M"));
  CommandFlags no_group = flags;
  no_group.group.reset();
  EXPECT_THAT(message({"cluster", "move"}, no_group),
              HasSubstr("needs --group=G"));
  CommandFlags zero = flags;
  zero.from = 0;
  EXPECT_THAT(message({"cluster", "move"}, zero), HasSubstr("> 0"));
  EXPECT_THAT(message({"cluster", "move", "2"}, flags),
              HasSubstr("takes no arguments"));
  CommandFlags from_only;
  from_only.from = 2;
  EXPECT_THAT(message({"cluster", "status"}, from_only),
              HasSubstr("--from does not apply to 'cluster'"));
}

TEST(ParseInvocationTest, ClusterCommandsTakeAGroup) {
  CommandFlags group;
  group.group = 7;
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"cluster", "status"},
           {"cluster", "add", "4", "r:1", "c:1"},
           {"cluster", "remove", "2"},
           {"cluster", "transfer"}}) {
    absl::StatusOr<Invocation> inv = ParseInvocation(args, group);
    ASSERT_TRUE(inv.ok()) << args[1] << ": " << inv.status();
    EXPECT_EQ(inv->group_id, 7u) << args[1];
  }
  absl::StatusOr<Invocation> fallback =
      ParseInvocation({"cluster", "status"}, {});
  ASSERT_TRUE(fallback.ok());
  EXPECT_EQ(fallback->group_id, 0u);
  EXPECT_THAT(
      std::string(
          ParseInvocation({"cluster", "recover"}, group).status().message()),
      HasSubstr("--group does not apply to 'cluster recover'"));
  EXPECT_THAT(
      std::string(
          ParseInvocation({"get", "ns", "k"}, group).status().message()),
      HasSubstr("--group does not apply"));
}

}  // namespace
}  // namespace dedup::ctl
