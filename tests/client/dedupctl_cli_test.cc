// dedupctl's parsing and rendering, without a server.
#include "client/dedupctl_cli.h"

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "client/dedup_client.h"
#include "client/dedupctl_backup.h"
#include "client/dedupctl_cluster.h"
#include "client/dedupctl_format.h"
#include "client/dedupctl_output.h"
#include "client/dedupctl_recover.h"
#include "common/flag_syntax.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

// Flags of the kinds dedupctl defines, for CheckFlagSyntax.
ABSL_FLAG(std::optional<uint32_t>, test_lease_ms, std::nullopt, "test");
ABSL_FLAG(std::string, test_address, "x", "test");
ABSL_FLAG(bool, test_verbose, false, "test");

namespace dedup::ctl {
namespace {

using ::testing::HasSubstr;

TEST(FormatTest, UnixMillisAsIsoUtcWithMillis) {
  EXPECT_EQ(FormatUnixMillis(1704164645678),
            "2024-01-02T03:04:05.678Z (1704164645678)");
  EXPECT_EQ(FormatUnixMillis(5), "1970-01-01T00:00:00.005Z (5)");
}

TEST(FormatTest, PrintableBytesAsTextOthersAsHex) {
  EXPECT_TRUE(IsPrintable("hello world ~"));
  EXPECT_TRUE(IsPrintable(""));
  EXPECT_FALSE(IsPrintable("line\n"));
  EXPECT_FALSE(IsPrintable(std::string("\x00", 1)));
  EXPECT_FALSE(IsPrintable("caf\xc3\xa9"));

  std::ostringstream out;
  PrintBytes(out, "result", "ok");
  PrintBytes(out, "result", std::string("\x01\xff", 2));
  PrintBytes(out, "result", "");
  EXPECT_EQ(out.str(), "result: ok\nresult_hex: 01ff\nresult:\n");
}

TEST(FormatTest, ParseHex) {
  EXPECT_EQ(*ParseHex("00aBff"), std::string("\x00\xab\xff", 3));
  EXPECT_EQ(*ParseHex(""), "");
  EXPECT_FALSE(ParseHex("abc").ok());
  EXPECT_FALSE(ParseHex("zz").ok());
}

TEST(FormatTest, BeginDuplicateShowsOutcomeAndResult) {
  v1::BeginResponse response;
  response.set_status(v1::BeginResponse::DUPLICATE);
  response.set_fence(7);
  response.set_outcome(v1::ERROR);
  response.set_result("boom");
  response.set_created_at(1000);
  response.set_completed_at(2000);
  response.set_attempts(1);
  std::ostringstream out;
  PrintResponse(out, response);
  EXPECT_EQ(out.str(),
            "status: DUPLICATE\n"
            "fence: 7\n"
            "outcome: ERROR\n"
            "result: boom\n"
            "created_at: 1970-01-01T00:00:01.000Z (1000)\n"
            "completed_at: 1970-01-01T00:00:02.000Z (2000)\n"
            "attempts: 1\n");
}

TEST(FormatTest, BeginInUseShowsRetryAfter) {
  v1::BeginResponse response;
  response.set_status(v1::BeginResponse::IN_USE);
  response.set_fence(3);
  response.set_retry_after_ms(250);
  std::ostringstream out;
  PrintResponse(out, response);
  EXPECT_EQ(out.str(), "status: IN_USE\nfence: 3\nretry_after_ms: 250\n");
}

TEST(FormatTest, GetNotFound) {
  std::ostringstream out;
  PrintResponse(out, v1::GetResponse());
  EXPECT_EQ(out.str(), "found: false\n");
}

TEST(ParseInvocationTest, BeginWithFlags) {
  CommandFlags flags;
  flags.args_hash_hex = "abcd";
  flags.owner = "me";
  flags.lease_ms = 1500;
  flags.wait_ms = 20;
  absl::StatusOr<Invocation> inv =
      ParseInvocation({"begin", "ns", "key"}, flags);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->command, Command::kBegin);
  EXPECT_EQ(inv->ns, "ns");
  EXPECT_EQ(inv->key, "key");
  EXPECT_EQ(inv->args_hash, "\xab\xcd");
  EXPECT_EQ(inv->begin.owner, "me");
  EXPECT_EQ(inv->begin.lease_ms, 1500u);
  EXPECT_EQ(inv->begin.ttl_s, 0u);
  EXPECT_EQ(inv->begin.wait_ms, 20u);
}

TEST(ParseInvocationTest, CompleteWithFenceAndOutcome) {
  CommandFlags flags;
  flags.outcome = "ERROR";
  flags.result = "bad";
  absl::StatusOr<Invocation> inv =
      ParseInvocation({"complete", "ns", "key", "42"}, flags);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->fence, 42u);
  EXPECT_EQ(inv->outcome, v1::ERROR);
  EXPECT_EQ(inv->result, "bad");

  inv = ParseInvocation({"complete", "ns", "key", "1"}, {});
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->outcome, v1::SUCCESS);
}

TEST(ParseInvocationTest, UsageErrors) {
  CommandFlags none;
  EXPECT_THAT(ParseInvocation({}, none).status().message(),
              HasSubstr("missing COMMAND"));
  EXPECT_THAT(ParseInvocation({"launch", "a", "b"}, none).status().message(),
              HasSubstr("unknown command"));
  EXPECT_THAT(ParseInvocation({"get", "a"}, none).status().message(),
              HasSubstr("takes NS KEY"));
  EXPECT_THAT(ParseInvocation({"release", "a", "b"}, none).status().message(),
              HasSubstr("takes NS KEY FENCE"));
  EXPECT_THAT(
      ParseInvocation({"renew", "a", "b", "-1"}, none).status().message(),
      HasSubstr("FENCE"));

  CommandFlags owner;
  owner.owner = "x";
  EXPECT_THAT(ParseInvocation({"get", "a", "b"}, owner).status().message(),
              HasSubstr("--owner does not apply to 'get'"));
  CommandFlags outcome;
  outcome.outcome = "maybe";
  EXPECT_THAT(
      ParseInvocation({"complete", "a", "b", "1"}, outcome).status().message(),
      HasSubstr("success or error"));
  CommandFlags hex;
  hex.args_hash_hex = "xyz";
  EXPECT_THAT(ParseInvocation({"begin", "a", "b"}, hex).status().message(),
              HasSubstr("--args_hash_hex"));
}

TEST(ParseAddressListTest, SplitsTrimsAndDropsDuplicates) {
  absl::StatusOr<std::vector<std::string>> one = ParseAddressList("a:1");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, std::vector<std::string>{"a:1"});
  absl::StatusOr<std::vector<std::string>> three =
      ParseAddressList("a:1, b:2 ,c:3,a:1");
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(*three, (std::vector<std::string>{"a:1", "b:2", "c:3"}));
  EXPECT_THAT(std::string(ParseAddressList("a:1,,b:2").status().message()),
              HasSubstr("--address: empty entry"));
  EXPECT_FALSE(ParseAddressList("").ok());
}

v1::ClusterStatusResponse NodeStatus(uint64_t id, const std::string& role,
                                     uint64_t term, uint64_t leader) {
  v1::ClusterStatusResponse s;
  s.set_node_id(id);
  s.set_role(role);
  s.set_term(term);
  s.set_leader_id(leader);
  s.set_commit_index(40 + id);
  s.set_applied_index(30 + id);
  s.set_last_index(50 + id);
  s.set_last_log_term(term - 1);
  for (uint64_t m = 1; m <= 3; ++m) {
    v1::ClusterMember* member = s.add_members();
    member->set_id(m);
    member->set_client_address("n" + std::to_string(m) + ":1");
    if (role == "leader") {
      member->set_match_index(50 - m);
      member->set_lag(m);
    }
  }
  return s;
}

TEST(PrintClusterStatusTest, RowsByIdWithTheLeadersViewOfLag) {
  std::vector<NodeReport> reports;
  reports.push_back({"n3:1", absl::UnavailableError("connection refused")});
  reports.push_back({"n2:1", NodeStatus(2, "leader", 7, 2)});
  reports.push_back({"n1:1", NodeStatus(1, "follower", 7, 0)});
  reports.push_back({"other:1", NodeStatus(1, "follower", 7, 0)});  // again
  std::ostringstream out;
  PrintClusterStatus(out, reports);
  EXPECT_EQ(
      out.str(),
      "ID  ADDRESS  ROLE         TERM  COMMIT  APPLIED  MATCH  LAG  "
      "LEADER  LOG_TERM  LOG_INDEX\n"
      "1   n1:1     follower     7     41      31       49     1    -       "
      "6         51\n"
      "2   n2:1     leader       7     42      32       48     2    2       "
      "6         52\n"
      "3   n3:1     unreachable  -     -       -        -      -    -       "
      "-         -\n");
}

TEST(PrintClusterStatusTest, NoLeaderNoLag) {
  std::vector<NodeReport> reports;
  reports.push_back({"n1:1", NodeStatus(1, "candidate", 9, 0)});
  reports.push_back({"x:1", absl::UnavailableError("down")});
  std::ostringstream out;
  PrintClusterStatus(out, reports);
  EXPECT_EQ(
      out.str(),
      "ID  ADDRESS  ROLE         TERM  COMMIT  APPLIED  MATCH  LAG  "
      "LEADER  LOG_TERM  LOG_INDEX\n"
      "1   n1:1     candidate    9     41      31       -      -    -       "
      "8         51\n"
      "?   x:1      unreachable  -     -       -        -      -    -       "
      "-         -\n");
}

TEST(ParseInvocationTest, ClusterRecoverTakesNoArguments) {
  absl::StatusOr<Invocation> recover =
      ParseInvocation({"cluster", "recover"}, {});
  ASSERT_TRUE(recover.ok()) << recover.status();
  EXPECT_EQ(recover->command, Command::kClusterRecover);
  EXPECT_FALSE(ParseInvocation({"cluster", "recover", "2"}, {}).ok());
}

TEST(ParseInvocationTest, BackupTakesADirAndNoFlag) {
  absl::StatusOr<Invocation> backup = ParseInvocation({"backup", "/b/1"}, {});
  ASSERT_TRUE(backup.ok()) << backup.status();
  EXPECT_EQ(backup->command, Command::kBackup);
  EXPECT_EQ(backup->dir, "/b/1");
  EXPECT_FALSE(ParseInvocation({"backup"}, {}).ok());
  EXPECT_FALSE(ParseInvocation({"backup", "a", "b"}, {}).ok());
  CommandFlags flags;
  flags.owner = "x";
  EXPECT_FALSE(ParseInvocation({"backup", "a"}, flags).ok());
}

TEST(PrintBackupSummaryTest, OneFieldPerLine) {
  BackupSummary s;
  s.dir = "/b/1";
  s.address = "127.0.0.1:50051";
  s.mode = "cluster";
  s.node_id = 2;
  s.applied_index = 77;
  s.term = 3;
  s.files = 4;
  s.bytes = 9000;
  s.estimated_records = 12;
  s.created_at_ms = 0;
  std::ostringstream out;
  PrintBackupSummary(out, s);
  EXPECT_EQ(out.str(),
            "dir: /b/1\naddress: 127.0.0.1:50051\nmode: cluster\nnode_id: 2\n"
            "applied_index: 77\nterm: 3\nfiles: 4\nbytes: 9000\n"
            "estimated_records: 12\n"
            "created_at: 1970-01-01T00:00:00.000Z (0)\n");
}

TEST(PrintBackupSummaryTest, JsonUsesTheProtoMappingsNames) {
  BackupSummary s;
  s.dir = "/b/1";
  s.address = "127.0.0.1:50051";
  s.mode = "single";
  s.node_id = 0;
  s.applied_index = 0;
  s.files = 4;
  s.bytes = 9000;
  s.estimated_records = 12;
  s.created_at_ms = 1000;
  const nlohmann::json j = BackupSummaryJson(s);
  EXPECT_EQ(j["dir"], "/b/1");
  EXPECT_EQ(j["mode"], "single");
  EXPECT_EQ(j["files"], "4");
  EXPECT_EQ(j["bytes"], "9000");
  EXPECT_EQ(j["estimatedRecords"], "12");
  EXPECT_EQ(j["nodeId"], "0");
  EXPECT_EQ(j["createdAt"], "1970-01-01T00:00:01.000Z");
  EXPECT_EQ(j.size(), 11u);
}

// A group with no leader: node 3 has the highest last log term although
// node 1's log is longer; node 2 ties with 3 on term but is shorter.
TEST(PrintRecoveryAdviceTest, NamesTheMostUpToDateNodeAndTheSteps) {
  std::vector<NodeReport> reports;
  v1::ClusterStatusResponse n1 = NodeStatus(1, "candidate", 9, 0);
  n1.set_last_log_term(4);
  n1.set_last_index(900);
  v1::ClusterStatusResponse n2 = NodeStatus(2, "follower", 9, 0);
  n2.set_last_log_term(5);
  n2.set_last_index(120);
  v1::ClusterStatusResponse n3 = NodeStatus(3, "candidate", 9, 0);
  n3.set_last_log_term(5);
  n3.set_last_index(121);
  reports.push_back({"n1:1", n1});
  reports.push_back({"n2:1", n2});
  reports.push_back({"n3:1", n3});
  reports.push_back({"n4:1", absl::UnavailableError("down")});
  std::ostringstream out;
  EXPECT_EQ(PrintRecoveryAdvice(out, reports), kExitOk);
  EXPECT_THAT(out.str(), HasSubstr("Most up-to-date reachable node: 3 at n3:1 "
                                   "(last log term 5, index 121)"));
  EXPECT_THAT(out.str(), HasSubstr("restart node 3 with its usual flags plus "
                                   "--recover_as_sole_voter"));
  EXPECT_THAT(out.str(),
              HasSubstr("dedupctl --address=n3:1 cluster add ID RAFT_ADDR"));
}

TEST(PrintRecoveryAdviceTest, RefusesAGroupWithALeaderOrNoAnswer) {
  std::vector<NodeReport> reports;
  reports.push_back({"n1:1", NodeStatus(1, "candidate", 9, 0)});
  reports.push_back({"n2:1", NodeStatus(2, "follower", 9, 3)});
  std::ostringstream out;
  EXPECT_EQ(PrintRecoveryAdvice(out, reports), kExitRejected);
  EXPECT_THAT(out.str(), HasSubstr("node 2 knows a leader (node 3)"));
  std::vector<NodeReport> none;
  none.push_back({"n1:1", absl::UnavailableError("down")});
  EXPECT_EQ(PrintRecoveryAdvice(out, none), kExitRpcError);
}

absl::Status Check(std::vector<std::string> args) {
  args.insert(args.begin(), "dedupctl");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  return CheckFlagSyntax(static_cast<int>(argv.size()), argv.data());
}

TEST(CheckFlagSyntaxTest, AcceptsAbslSyntax) {
  EXPECT_TRUE(Check({"get", "--test_address=h:1", "a", "b"}).ok());
  EXPECT_TRUE(Check({"-test_address", "h:1", "get", "a", "b"}).ok());
  EXPECT_TRUE(Check({"--test_lease_ms=10", "--test_verbose"}).ok());
  EXPECT_TRUE(Check({"--notest_verbose", "--test_verbose=false"}).ok());
  EXPECT_TRUE(Check({"get", "-", "b"}).ok());
  EXPECT_TRUE(Check({"get", "--", "--not-a-flag", "b"}).ok());
}

TEST(CheckFlagSyntaxTest, RejectsWhatParseCommandLineWouldExitOn) {
  EXPECT_THAT(Check({"--bogus"}).message(), HasSubstr("unknown flag --bogus"));
  EXPECT_THAT(Check({"--test_lease_ms=-1"}).message(),
              HasSubstr("test_lease_ms"));
  EXPECT_THAT(Check({"--test_lease_ms"}).message(), HasSubstr("missing value"));
  EXPECT_FALSE(Check({"--notest_address"}).ok());
  EXPECT_FALSE(Check({"--notest_verbose=1"}).ok());
}

char* Arg(const char* s) { return const_cast<char*>(s); }

TEST(IsHelpRequestTest, Spellings) {
  char* help[] = {Arg("dedupctl"), Arg("get"), Arg("--help")};
  EXPECT_TRUE(IsHelpRequest(3, help));
  char* bare[] = {Arg("dedupctl"), Arg("help")};
  EXPECT_TRUE(IsHelpRequest(2, bare));
  char* key_named_help[] = {Arg("dedupctl"), Arg("get"), Arg("ns"),
                            Arg("help")};
  EXPECT_FALSE(IsHelpRequest(4, key_named_help));
  char* after_dashes[] = {Arg("dedupctl"), Arg("get"), Arg("--"), Arg("-h")};
  EXPECT_FALSE(IsHelpRequest(4, after_dashes));
}

}  // namespace
}  // namespace dedup::ctl

namespace dedup::ctl {
namespace {

TEST(ParseTest, CheckpointNeedsAStepAndTakesDataAndLease) {
  CommandFlags flags;
  EXPECT_THAT(
      ParseInvocation({"checkpoint", "ns", "k", "7"}, flags).status().message(),
      ::testing::HasSubstr("--step"));
  flags.step = "charged";
  flags.data = "ch_1";
  flags.lease_ms = 5000;
  absl::StatusOr<Invocation> inv =
      ParseInvocation({"checkpoint", "ns", "k", "7"}, flags);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->command, Command::kCheckpoint);
  EXPECT_EQ(inv->fence, 7u);
  EXPECT_EQ(inv->step, "charged");
  EXPECT_EQ(inv->data, "ch_1");
  EXPECT_EQ(inv->lease_ms, 5000u);
  flags.accept_rerun = true;
  EXPECT_THAT(
      ParseInvocation({"checkpoint", "ns", "k", "7"}, flags).status().message(),
      ::testing::HasSubstr("--accept_rerun does not apply"));
}

TEST(ParseTest, BeginAcceptsARerun) {
  CommandFlags flags;
  flags.accept_rerun = true;
  absl::StatusOr<Invocation> inv = ParseInvocation({"begin", "ns", "k"}, flags);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_TRUE(inv->begin.accept_rerun);
}

TEST(FormatTest, BeginExpiredAndStartedWithCheckpoint) {
  v1::BeginResponse expired;
  expired.set_status(v1::BeginResponse::EXPIRED);
  expired.set_fence(3);
  expired.set_outcome(v1::ERROR);
  expired.set_tombstone_expires_at(5);
  std::ostringstream out;
  PrintResponse(out, expired);
  EXPECT_THAT(out.str(), ::testing::HasSubstr("status: EXPIRED\nfence: 3\n"
                                              "outcome: ERROR\n"
                                              "tombstone_expires_at: "));
  v1::BeginResponse started;
  started.set_status(v1::BeginResponse::STARTED);
  started.set_takeover(true);
  started.mutable_checkpoint()->set_step("charged");
  started.mutable_checkpoint()->set_fence(2);
  std::ostringstream out2;
  PrintResponse(out2, started);
  EXPECT_THAT(out2.str(), ::testing::HasSubstr("checkpoint_step: charged\n"));
  EXPECT_THAT(out2.str(), ::testing::HasSubstr("checkpoint_fence: 2\n"));
}

// The argv scans that run before absl parses the flags.
TEST(OutputTest, FormatAndFlagsFoundInArgs) {
  auto scan = [](std::vector<std::string> args) {
    args.insert(args.begin(), "dedupctl");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return std::make_pair(
        OutputFormatInArgs(static_cast<int>(argv.size()), argv.data()),
        FlagInArgs(static_cast<int>(argv.size()), argv.data(), "output"));
  };
  EXPECT_EQ(scan({"get", "a", "b"}).first, OutputFormat::kText);
  EXPECT_EQ(scan({"-o", "json", "get"}).first, OutputFormat::kJson);
  EXPECT_EQ(scan({"--o=json"}).first, OutputFormat::kJson);
  EXPECT_EQ(scan({"-output", "json"}).first, OutputFormat::kJson);
  EXPECT_EQ(scan({"--output=text"}).first, OutputFormat::kText);
  EXPECT_EQ(scan({"--", "-o", "json"}).first, OutputFormat::kText);
  EXPECT_TRUE(scan({"--output=json"}).second);
  EXPECT_TRUE(scan({"-output", "json"}).second);
  EXPECT_FALSE(scan({"-o", "json"}).second);
  EXPECT_FALSE(scan({"--output_file=x"}).second);
  EXPECT_FALSE(scan({"get", "output"}).second);
  EXPECT_EQ(FlagOrEnvironment(false, "default", "from-env"), "from-env");
  EXPECT_EQ(FlagOrEnvironment(true, "flag", "from-env"), "flag");
  EXPECT_EQ(FlagOrEnvironment(false, "default", ""), "default");
}

TEST(OutputTest, ErrorsAsTextOrOneJsonObject) {
  std::ostringstream text;
  EXPECT_EQ(PrintError(OutputFormat::kText, text,
                       absl::NotFoundError("no such key"), 2),
            2);
  EXPECT_EQ(text.str(), "dedupctl: NOT_FOUND: no such key\n");
  std::ostringstream json;
  EXPECT_EQ(PrintError(OutputFormat::kJson, json,
                       absl::NotFoundError("no \"such\" key"), 3),
            3);
  EXPECT_EQ(json.str(),
            "{\"error\":{\"code\":\"NOT_FOUND\",\"message\":\"no \\\"such\\\" "
            "key\"}}\n");
  EXPECT_FALSE(ParseOutputFormat("yaml").ok());
}

TEST(OutputTest, ProtoJsonKeepsEveryFieldWithTheMappingsNames) {
  v1::CompleteResponse response;
  response.set_status(v1::CompleteResponse::STALE_FENCE);
  std::ostringstream out;
  PrintJson(out, response);
  EXPECT_EQ(
      out.str(),
      "{\"expiresAt\":\"0\",\"fence\":\"0\",\"status\":\"STALE_FENCE\"}\n");
}

TEST(ClientEnvironmentTest, AddressListsSplitTrimAndDropDuplicates) {
  absl::StatusOr<std::vector<std::string>> list =
      SplitAddressList(" a:1, b:2 ,a:1");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(*list, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_FALSE(SplitAddressList("a:1,,b:2").ok());
  EXPECT_FALSE(SplitAddressList("").ok());
}

}  // namespace
}  // namespace dedup::ctl
