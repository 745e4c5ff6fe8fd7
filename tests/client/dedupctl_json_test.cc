// dedupctl -o json against the real dedupd: every command's output parses as
// one JSON document with the proto3 JSON mapping's field names, errors are a
// JSON object on stderr, exit codes are those of the text output; and the
// DEDUP_* environment variables, which flags override.
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/client/run_ctl.h"
#include "tests/testing/server_process.h"
#include "tests/testing/shared_server.h"

namespace dedup {
namespace {

using ::dedup::testing::CtlResult;
using ::dedup::testing::RunCtl;
using ::testing::HasSubstr;
using json = nlohmann::json;

class DedupctlJsonTest : public testing::SharedDedupdTest<DedupctlJsonTest> {
 public:
  static std::vector<std::string> Flags() {
    const std::string file =
        absl::StrCat("/tmp/dedupctl-json-policy-", getpid(), ".json");
    std::ofstream(file) << R"({"policies": [
      {"prefix": "billing:", "name": "billing", "default_ttl_s": 30,
       "max_ttl_s": 60, "on_error": "retry"}]})";
    return {"--durability=none", "--policy_file=" + file};
  }

 protected:
  // Runs dedupctl -o json against the test server.
  static CtlResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(),
                {"--address=" + server().address(), "-o", "json"});
    return RunCtl(args);
  }

  // The one JSON document of a successful command's stdout.
  static json Parse(const CtlResult& r) {
    EXPECT_EQ(r.err, "");
    EXPECT_EQ(r.out.back(), '\n') << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line: " << r.out;
    return json::parse(r.out);
  }

  // The error object on stderr of a failed command (nothing on stdout).
  static json ParseError(const CtlResult& r) {
    EXPECT_EQ(r.out, "");
    const json doc = json::parse(r.err);
    EXPECT_EQ(doc.size(), 1u) << r.err;
    EXPECT_TRUE(doc.at("error").at("code").is_string()) << r.err;
    EXPECT_TRUE(doc.at("error").at("message").is_string()) << r.err;
    return doc.at("error");
  }
};

TEST_F(DedupctlJsonTest, DataCommandsPrintTheAnswerInTheProtoJsonMapping) {
  const json begin =
      Parse(Ctl({"begin", "ctl-json", "k1", "--args_hash_hex=0a0b0c",
                 "--owner=o1", "--lease_ms=30000"}));
  EXPECT_EQ(begin.at("status"), "STARTED");
  EXPECT_EQ(begin.at("takeover"), false);
  EXPECT_EQ(begin.at("attempts"), 1);
  // uint64 and int64 as strings; defaults present.
  const std::string fence = begin.at("fence");
  EXPECT_NE(fence, "0");
  EXPECT_EQ(begin.at("completedAt"), "0");
  EXPECT_GT(std::stoll(begin.at("leaseExpiresAt").get<std::string>()), 0);

  const json checkpoint = Parse(Ctl(
      {"checkpoint", "ctl-json", "k1", fence, "--step=charged", "--data=d1"}));
  EXPECT_EQ(checkpoint.at("status"), "OK");
  EXPECT_EQ(checkpoint.at("fence"), fence);

  const json renew =
      Parse(Ctl({"renew", "ctl-json", "k1", fence, "--lease_ms=20000"}));
  EXPECT_EQ(renew.at("status"), "OK");

  const json in_flight = Parse(Ctl({"get", "ctl-json", "k1"}));
  EXPECT_EQ(in_flight.at("found"), true);
  const json& record = in_flight.at("record");
  EXPECT_EQ(record.at("state"), "IN_FLIGHT");
  EXPECT_EQ(record.at("owner"), "o1");
  EXPECT_EQ(record.at("argsHash"), absl::Base64Escape("\x0a\x0b\x0c"));
  EXPECT_EQ(record.at("checkpoint").at("step"), "charged");
  EXPECT_EQ(record.at("checkpoint").at("data"), absl::Base64Escape("d1"));

  const json complete =
      Parse(Ctl({"complete", "ctl-json", "k1", fence, "--result=shipped"}));
  EXPECT_EQ(complete.at("status"), "OK");
  EXPECT_EQ(complete.at("fence"), fence);

  const json duplicate =
      Parse(Ctl({"begin", "ctl-json", "k1", "--args_hash_hex=0a0b0c"}));
  EXPECT_EQ(duplicate.at("status"), "DUPLICATE");
  EXPECT_EQ(duplicate.at("outcome"), "SUCCESS");
  EXPECT_EQ(duplicate.at("result"), absl::Base64Escape("shipped"));

  // A refusal: the document on stdout, exit 3 as in text.
  const CtlResult stale = Ctl({"release", "ctl-json", "k1", "999999"});
  EXPECT_EQ(stale.exit_code, 3) << stale.err;
  EXPECT_EQ(Parse(stale).at("status"), "STALE_FENCE");

  const CtlResult forget = Ctl({"forget", "ctl-json", "k1"});
  EXPECT_EQ(forget.exit_code, 0);
  EXPECT_EQ(Parse(forget).at("existed"), true);
  const json gone = Parse(Ctl({"get", "ctl-json", "k1"}));
  EXPECT_EQ(gone.at("found"), false);
  // --output=json is the long spelling.
  const CtlResult long_form =
      RunCtl({"--address=" + server().address(), "--output=json", "get",
              "ctl-json", "k1"});
  EXPECT_EQ(json::parse(long_form.out), gone);
}

TEST_F(DedupctlJsonTest, AdminCommands) {
  ASSERT_EQ(Ctl({"begin", "ctl-json", "s1"}).exit_code, 0);
  const json stats = Parse(Ctl({"stats"}));
  EXPECT_EQ(stats.at("durability"), "none");
  EXPECT_TRUE(stats.at("version").is_string());
  EXPECT_GE(
      std::stoll(stats.at("beginOutcomes").at("started").get<std::string>()),
      1);
  const json compact = Parse(Ctl({"compact"}));
  EXPECT_TRUE(compact.contains("expiredDropped")) << compact;
  EXPECT_TRUE(compact.contains("durationMs")) << compact;
  const json policy = Parse(Ctl({"policy", "billing:invoices"}));
  EXPECT_EQ(policy.at("policy"), "billing");
  EXPECT_EQ(policy.at("prefix"), "billing:");
  EXPECT_EQ(policy.at("defaultTtlS"), 30);
  EXPECT_EQ(policy.at("maxTtlS"), 60);
  EXPECT_EQ(policy.at("onError"), "retry");
  const json reload = Parse(Ctl({"reload-policy"}));
  EXPECT_EQ(reload.at("policies"), 1);
}

TEST_F(DedupctlJsonTest, ErrorsAreAJsonObjectOnStderrWithTheTextExitCodes) {
  const CtlResult invalid = Ctl({"begin", "ctl-json", ""});
  EXPECT_EQ(invalid.exit_code, 2);
  EXPECT_EQ(ParseError(invalid).at("code"), "INVALID_ARGUMENT");

  const CtlResult not_cluster = Ctl({"cluster", "status"});
  EXPECT_EQ(not_cluster.exit_code, 2);
  const json error = ParseError(not_cluster);
  EXPECT_EQ(error.at("code"), "UNIMPLEMENTED");
  EXPECT_THAT(error.at("message").get<std::string>(),
              HasSubstr("not in cluster mode"));

  const CtlResult down = RunCtl({"--address=127.0.0.1:1", "--deadline_ms=300",
                                 "-o", "json", "get", "ctl-json", "k"});
  EXPECT_EQ(down.exit_code, 2);
  EXPECT_EQ(ParseError(down).at("code"), "UNAVAILABLE");

  // Usage errors too, wherever -o json stands.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"-o", "json", "get", "a"},
           {"get", "a", "b", "--o=json", "--owner=x"},
           {"--output=json", "--no_such_flag", "get", "a", "b"},
           {"-o", "json", "--output=text", "get", "a", "b"}}) {
    const CtlResult usage = RunCtl(args);
    EXPECT_EQ(usage.exit_code, 64) << ::testing::PrintToString(args);
    EXPECT_EQ(ParseError(usage).at("code"), "INVALID_ARGUMENT") << usage.err;
  }
  const CtlResult bad_format = RunCtl({"-o", "yaml", "get", "a", "b"});
  EXPECT_EQ(bad_format.exit_code, 64);
  EXPECT_THAT(bad_format.err, HasSubstr("text or json"));
}

// DEDUP_ADDRESS (a list: the first entry is down), DEDUP_TOKEN_FILE (a token
// file that does not exist is named in the usage error); a flag wins over
// its variable.
TEST_F(DedupctlJsonTest, EnvironmentVariablesAndFlagsOverrideThem) {
  const std::string list = "127.0.0.1:1," + server().address();
  const CtlResult from_env = RunCtl({"-o", "json", "get", "ctl-json", "env"},
                                    {"DEDUP_ADDRESS=" + list});
  EXPECT_EQ(from_env.exit_code, 0) << from_env.err;
  EXPECT_EQ(json::parse(from_env.out).at("found"), false);

  const CtlResult flag_wins =
      RunCtl({"--address=127.0.0.1:1", "--deadline_ms=300",
              "--follow_leader=false", "get", "ctl-json", "env"},
             {"DEDUP_ADDRESS=" + server().address()});
  EXPECT_EQ(flag_wins.exit_code, 2) << flag_wins.out;

  const CtlResult token_env =
      RunCtl({"get", "ctl-json", "env"},
             {"DEDUP_ADDRESS=" + server().address(),
              "DEDUP_TOKEN_FILE=/nonexistent/dedup.token"});
  EXPECT_EQ(token_env.exit_code, 64);
  EXPECT_THAT(token_env.err, HasSubstr("/nonexistent/dedup.token"));
  const CtlResult token_flag_wins =
      RunCtl({"--token_file=", "get", "ctl-json", "env"},
             {"DEDUP_ADDRESS=" + server().address(),
              "DEDUP_TOKEN_FILE=/nonexistent/dedup.token"});
  EXPECT_EQ(token_flag_wins.exit_code, 0) << token_flag_wins.err;

  const CtlResult ca_env =
      RunCtl({"get", "ctl-json", "env"}, {"DEDUP_ADDRESS=" + server().address(),
                                          "DEDUP_CA_FILE=/nonexistent/ca.pem"});
  EXPECT_EQ(ca_env.exit_code, 64);
  EXPECT_THAT(ca_env.err, HasSubstr("/nonexistent/ca.pem"));
}

}  // namespace
}  // namespace dedup
