// The dedupctl binary against the real dedupd: output and exit codes.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/run_ctl.h"
#include "tests/testing/server_process.h"
#include "tests/testing/shared_server.h"

namespace dedup {
namespace {

using ::dedup::testing::CtlResult;
using ::dedup::testing::Field;
using ::dedup::testing::RunCtl;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class DedupctlTest : public testing::SharedDedupdTest<DedupctlTest> {
 public:
  static std::vector<std::string> Flags() { return {"--durability=none"}; }

 protected:
  // Runs dedupctl against the test server.
  static CtlResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), "--address=" + server().address());
    return RunCtl(args);
  }
};

TEST_F(DedupctlTest, BeginCompleteBeginDuplicateCycle) {
  CtlResult begin =
      Ctl({"begin", "ctl-itest", "order-1", "--args_hash_hex=0a0b0c",
           "--owner=ctl-owner", "--lease_ms=30000"});
  ASSERT_EQ(begin.exit_code, 0) << begin.err;
  EXPECT_EQ(begin.err, "");
  EXPECT_EQ(Field(begin.out, "status"), "STARTED");
  EXPECT_EQ(Field(begin.out, "takeover"), "false");
  EXPECT_THAT(Field(begin.out, "lease_expires_at"), HasSubstr("Z ("));
  EXPECT_EQ(Field(begin.out, "attempts"), "1");
  uint64_t fence = 0;
  ASSERT_TRUE(absl::SimpleAtoi(Field(begin.out, "fence"), &fence)) << begin.out;

  CtlResult complete = Ctl({"complete", "ctl-itest", "order-1",
                            std::to_string(fence), "--result=shipped"});
  ASSERT_EQ(complete.exit_code, 0) << complete.err;
  EXPECT_EQ(Field(complete.out, "status"), "OK");
  EXPECT_EQ(Field(complete.out, "fence"), std::to_string(fence));

  CtlResult again =
      Ctl({"begin", "ctl-itest", "order-1", "--args_hash_hex=0A0B0C"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(Field(again.out, "status"), "DUPLICATE");
  EXPECT_EQ(Field(again.out, "fence"), std::to_string(fence));
  EXPECT_EQ(Field(again.out, "outcome"), "SUCCESS");
  EXPECT_EQ(Field(again.out, "result"), "shipped");
  // ISO-8601 UTC with milliseconds, then the raw Unix ms.
  EXPECT_THAT(Field(again.out, "completed_at"),
              ::testing::MatchesRegex(
                  "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
                  "\\.[0-9]{3}Z \\([0-9]+\\)"));

  CtlResult get = Ctl({"get", "ctl-itest", "order-1"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_EQ(Field(get.out, "found"), "true");
  EXPECT_EQ(Field(get.out, "state"), "COMPLETED");
  EXPECT_EQ(Field(get.out, "args_hash_hex"), "0a0b0c");
  EXPECT_EQ(Field(get.out, "owner"), "ctl-owner");

  // A second Complete with another result is refused: exit 3, not an error.
  CtlResult conflicting = Ctl({"complete", "ctl-itest", "order-1",
                               std::to_string(fence), "--result=other"});
  EXPECT_EQ(conflicting.exit_code, 3) << conflicting.out << conflicting.err;
  EXPECT_EQ(Field(conflicting.out, "status"), "ALREADY_COMPLETED");

  CtlResult forget = Ctl({"forget", "ctl-itest", "order-1"});
  ASSERT_EQ(forget.exit_code, 0) << forget.err;
  EXPECT_EQ(Field(forget.out, "existed"), "true");
  CtlResult gone = Ctl({"get", "ctl-itest", "order-1"});
  ASSERT_EQ(gone.exit_code, 0) << gone.err;
  EXPECT_EQ(gone.out, "found: false\n");
}

// stats prints a table from the Admin service; its begin counts move with
// the calls made; compact answers with what it dropped.
// --version on both binaries: the project version and the commit, the same
// build the server reports in Stats (never Abseil's line about NDEBUG).
TEST_F(DedupctlTest, VersionOfBothBinariesNamesTheBuildStatsReports) {
  const CtlResult stats = Ctl({"stats"});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  std::string reported;  // the table's "version   0.1.0 (<sha>)" row
  for (absl::string_view line : absl::StrSplit(stats.out, '\n')) {
    if (absl::ConsumePrefix(&line, "version ")) {
      reported = std::string(absl::StripAsciiWhitespace(line));
    }
  }
  const std::string build = absl::StrReplaceAll(reported, {{"(", "(git "}});
  EXPECT_THAT(build, ::testing::MatchesRegex(
                         "[0-9]+\\.[0-9]+\\.[0-9]+ \\(git [0-9a-f]+\\)|"
                         "[0-9]+\\.[0-9]+\\.[0-9]+ \\(git unknown\\)"));
  const CtlResult ctl = RunCtl({"--version"});
  EXPECT_EQ(ctl.exit_code, 0);
  EXPECT_EQ(ctl.out, "dedupctl " + build + "\n");
  absl::StatusOr<testing::ProcessResult> dedupd =
      testing::RunProcess(testing::ServerBinary(), {"--version"});
  ASSERT_TRUE(dedupd.ok()) << dedupd.status();
  EXPECT_EQ(dedupd->exit_code, 0);
  EXPECT_EQ(dedupd->output, "dedupd " + build + "\n");
}

TEST_F(DedupctlTest, StatsTableAndCompact) {
  CtlResult before = Ctl({"stats"});
  ASSERT_EQ(before.exit_code, 0) << before.err;
  EXPECT_THAT(before.out, HasSubstr("durability"));
  EXPECT_THAT(before.out, HasSubstr("records (estimate)"));
  EXPECT_THAT(before.out, HasSubstr("in flight, lease live"));
  EXPECT_THAT(before.out, HasSubstr("begin answers since start:"));
  auto started_count = [](const std::string& table) {
    for (absl::string_view line : absl::StrSplit(table, '\n')) {
      if (absl::StartsWith(line, "  started ")) {
        uint64_t n = 0;
        absl::string_view rest = absl::StripAsciiWhitespace(line.substr(10));
        (void)absl::SimpleAtoi(rest.substr(0, rest.find(' ')), &n);
        return n;
      }
    }
    return uint64_t{0};
  };
  const uint64_t started_before = started_count(before.out);
  ASSERT_EQ(Ctl({"begin", "ctl-stats", "k1"}).exit_code, 0);
  ASSERT_EQ(Ctl({"begin", "ctl-stats", "k2"}).exit_code, 0);
  CtlResult after = Ctl({"stats"});
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(started_count(after.out), started_before + 2) << after.out;

  CtlResult compact = Ctl({"compact"});
  ASSERT_EQ(compact.exit_code, 0) << compact.err;
  EXPECT_EQ(Field(compact.out, "expired_dropped"), "0");
  EXPECT_EQ(Ctl({"stats", "extra"}).exit_code, 64);
}

TEST_F(DedupctlTest, BinaryResultPrintedAsHexAndErrorOutcome) {
  CtlResult begin = Ctl({"begin", "ctl-itest", "order-2"});
  ASSERT_EQ(begin.exit_code, 0) << begin.err;
  const std::string fence = Field(begin.out, "fence");
  CtlResult complete = Ctl({"complete", "ctl-itest", "order-2", fence,
                            "--outcome=error", "--result=line1\nline2"});
  ASSERT_EQ(complete.exit_code, 0) << complete.err;
  CtlResult again = Ctl({"begin", "ctl-itest", "order-2"});
  EXPECT_EQ(Field(again.out, "outcome"), "ERROR");
  EXPECT_EQ(Field(again.out, "result_hex"), "6c696e65310a6c696e6532");
}

TEST_F(DedupctlTest, StaleAndMissingFencesExitThree) {
  CtlResult release = Ctl({"release", "ctl-itest", "never-begun", "5"});
  EXPECT_EQ(release.exit_code, 3) << release.err;
  EXPECT_EQ(Field(release.out, "status"), "NOT_FOUND");

  CtlResult begin = Ctl({"begin", "ctl-itest", "order-3"});
  ASSERT_EQ(begin.exit_code, 0) << begin.err;
  uint64_t fence = 0;
  ASSERT_TRUE(absl::SimpleAtoi(Field(begin.out, "fence"), &fence));
  CtlResult stale = Ctl({"renew", "ctl-itest", "order-3",
                         std::to_string(fence + 1000), "--lease_ms=5000"});
  EXPECT_EQ(stale.exit_code, 3) << stale.err;
  EXPECT_EQ(Field(stale.out, "status"), "STALE_FENCE");

  CtlResult renew = Ctl({"renew", "ctl-itest", "order-3", std::to_string(fence),
                         "--lease_ms=5000"});
  EXPECT_EQ(renew.exit_code, 0) << renew.err;
  EXPECT_EQ(Field(renew.out, "status"), "OK");
  CtlResult ok =
      Ctl({"release", "ctl-itest", "order-3", std::to_string(fence)});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(Field(ok.out, "status"), "OK");
}

TEST_F(DedupctlTest, GrpcErrorExitsTwoWithMessageOnStderr) {
  CtlResult empty_key = Ctl({"begin", "ctl-itest", ""});
  EXPECT_EQ(empty_key.exit_code, 2);
  EXPECT_EQ(empty_key.out, "");
  EXPECT_THAT(empty_key.err, StartsWith("dedupctl: INVALID_ARGUMENT"));
}

// A single node has no dedup.v1.Cluster: the error says so (a gRPC error:
// exit 2), not that the request could not be parsed.
TEST_F(DedupctlTest, ClusterStatusOnASingleNodeSaysSo) {
  CtlResult status = Ctl({"cluster", "status"});
  EXPECT_EQ(status.exit_code, 2);
  EXPECT_EQ(status.out, "");
  EXPECT_THAT(status.err, HasSubstr("UNIMPLEMENTED: this node is not in "
                                    "cluster mode"));
}

TEST_F(DedupctlTest, UnreachableServerExitsTwo) {
  CtlResult down = RunCtl(
      {"--address=127.0.0.1:1", "--deadline_ms=500", "get", "ctl-itest", "k"});
  EXPECT_EQ(down.exit_code, 2);
  EXPECT_THAT(down.err, HasSubstr("UNAVAILABLE"));
}

TEST(DedupctlUsageTest, UsageErrorsExit64WithUsageOnStderr) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {},
           {"frobnicate", "a", "b"},
           {"get", "a"},
           {"complete", "a", "b", "not-a-number"},
           {"get", "a", "b", "--owner=x"},
           {"--no_such_flag", "get", "a", "b"},
           {"begin", "a", "b", "--lease_ms=-1"},
           {"begin", "a", "b", "--args_hash_hex=xyz"},
       }) {
    CtlResult r = RunCtl(args);
    EXPECT_EQ(r.exit_code, 64) << ::testing::PrintToString(args);
    EXPECT_THAT(r.err, HasSubstr("usage: dedupctl"));
    EXPECT_EQ(r.out, "");
  }
}

TEST(DedupctlUsageTest, HelpGoesToStdoutAndExitsZero) {
  for (const char* spelling : {"--help", "-h", "help"}) {
    CtlResult r = RunCtl({spelling});
    EXPECT_EQ(r.exit_code, 0) << spelling;
    EXPECT_THAT(r.out, HasSubstr("usage: dedupctl"));
    EXPECT_THAT(r.out, HasSubstr("exit codes"));
  }
}

}  // namespace
}  // namespace dedup
