// The JSON event log: one line per duplicate, takeover, stale-fence rejection
// and conflict, with hashed keys unless raw keys are allowed, and sampling.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace dedup::testing {
namespace {

// A temporary directory removed with the test.
class TempDir {
 public:
  TempDir() : path_(*MakeTempDir("dedup-events")) {}
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Drives one of each logged event on `key` (plus quiet calls that must not
// be logged) and stops the server so the log is flushed.
void DriveEvents(ServerProcess& server, const std::string& key) {
  TestClient c(server.address(), "billing");
  v1::BeginRequest first = c.BeginReq(key, "owner-1");
  first.set_lease_ms(100);
  const v1::BeginResponse started = c.Begin(first);
  ASSERT_EQ(started.status(), v1::BeginResponse::STARTED);
  SleepMs(150);
  const v1::BeginResponse taken = c.Begin(key, "owner-2");  // takeover
  ASSERT_TRUE(taken.takeover());
  ASSERT_EQ(c.Complete(key, started.fence(), "late").status(),
            v1::CompleteResponse::STALE_FENCE);
  ASSERT_EQ(c.Complete(key, taken.fence(), "sent").status(),
            v1::CompleteResponse::OK);
  ASSERT_EQ(c.Begin(key, "owner-3").status(), v1::BeginResponse::DUPLICATE);
  ASSERT_EQ(c.Begin(c.BeginReq(key, "owner-4", "other-args")).status(),
            v1::BeginResponse::CONFLICT);
  c.Disconnect();
  ASSERT_TRUE(server.Stop().ok());
}

TEST(EventLogTest, LogsEachEventOnceWithHashedKey) {
  const TempDir dir;
  const std::string log = dir.path() + "/events.jsonl";
  DEDUP_START_SERVER(server,
                     {"--durability=none", absl::StrCat("--event_log=", log)});
  const std::string key = "customer-4711-invoice-9";
  DriveEvents(*server, key);

  const std::vector<std::string> lines = ReadLines(log);
  ASSERT_EQ(lines.size(), 4u) << absl::StrJoin(lines, "\n");
  const char* expected[] = {"takeover", "stale_fence", "duplicate", "conflict"};
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    EXPECT_TRUE(absl::StartsWith(line, "{\"ts\":\"")) << line;
    EXPECT_TRUE(absl::EndsWith(line, "}")) << line;
    EXPECT_TRUE(absl::StrContains(
        line, absl::StrCat("\"event\":\"", expected[i], "\"")))
        << line;
    EXPECT_TRUE(absl::StrContains(line, "\"namespace\":\"billing\"")) << line;
    EXPECT_TRUE(absl::StrContains(line, "\"key_hash\":\"")) << line;
    EXPECT_FALSE(absl::StrContains(line, key)) << "raw key leaked: " << line;
    EXPECT_TRUE(absl::StrContains(line, "\"age_ms\":")) << line;
    EXPECT_TRUE(absl::StrContains(line, "\"attempts\":")) << line;
  }
  EXPECT_TRUE(absl::StrContains(lines[0], "\"attempts\":2")) << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[1], "\"method\":\"Complete\""));
  EXPECT_TRUE(absl::StrContains(lines[2], "\"outcome\":\"SUCCESS\""));
  // Every event names the same key the same way.
  const std::string hash = lines[0].substr(lines[0].find("\"key_hash\""), 30);
  for (const std::string& line : lines) {
    EXPECT_TRUE(absl::StrContains(line, hash)) << line;
  }
}

// The key_hash of the first line of the log at `path`.
std::string FirstKeyHash(const std::string& path) {
  const std::vector<std::string> lines = ReadLines(path);
  if (lines.empty()) return "";
  const size_t at = lines[0].find("\"key_hash\":\"");
  return at == std::string::npos ? "" : lines[0].substr(at + 12, 16);
}

// Hashes are keyed: a guessable key cannot be found by hashing candidates.
// The secret is made once per data dir, or shared through a file.
TEST(EventLogTest, KeyHashesAreKeyedBySecret) {
  const TempDir dir;
  const std::string key = "order-42";
  auto run = [&](const std::string& data_dir, const std::string& log,
                 std::vector<std::string> flags, const std::string& k) {
    flags.push_back("--durability=none");
    flags.push_back(absl::StrCat("--event_log=", log));
    DEDUP_START_SERVER(server, flags, data_dir);
    DriveEvents(*server, k);
  };
  auto secret_of = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string a = dir.path() + "/a", b = dir.path() + "/b";
  run(a, dir.path() + "/a1.jsonl", {}, key);
  const std::string secret = secret_of(a + "/event-log.key");
  EXPECT_EQ(secret.size(), 32u);
  run(a, dir.path() + "/a2.jsonl", {}, "order-43");  // a restart keeps it
  EXPECT_EQ(secret_of(a + "/event-log.key"), secret);
  run(b, dir.path() + "/b.jsonl", {}, key);
  const std::string a1 = FirstKeyHash(dir.path() + "/a1.jsonl");
  ASSERT_EQ(a1.size(), 16u);
  EXPECT_NE(FirstKeyHash(dir.path() + "/b.jsonl"), a1);
  // Not the plain SHA-256 prefix of the key.
  EXPECT_NE(a1, "3bf8b157c4238eef");  // SHA-256("order-42")
  EXPECT_TRUE(std::filesystem::exists(a + "/event-log.key"));
  EXPECT_EQ(std::filesystem::status(a + "/event-log.key").permissions() &
                std::filesystem::perms::others_read,
            std::filesystem::perms::none);

  // One key file for two servers (the nodes of a group): equal hashes.
  const std::string shared = dir.path() + "/shared.key";
  run(dir.path() + "/c", dir.path() + "/c.jsonl",
      {"--event_log_key_file=" + shared}, key);
  run(dir.path() + "/d", dir.path() + "/d.jsonl",
      {"--event_log_key_file=" + shared}, key);
  EXPECT_EQ(FirstKeyHash(dir.path() + "/c.jsonl"),
            FirstKeyHash(dir.path() + "/d.jsonl"));
  EXPECT_NE(FirstKeyHash(dir.path() + "/c.jsonl"), a1);
}

TEST(EventLogTest, RawKeysOnlyWhenAllowedAndSamplingThins) {
  const TempDir dir;
  const std::string raw_log = dir.path() + "/raw.jsonl";
  {
    DEDUP_START_SERVER(server, {"--durability=none", "--event_log_raw_keys",
                                absl::StrCat("--event_log=", raw_log)});
    DriveEvents(*server, "visible-key");
  }
  const std::vector<std::string> raw = ReadLines(raw_log);
  ASSERT_EQ(raw.size(), 4u);
  for (const std::string& line : raw) {
    EXPECT_TRUE(absl::StrContains(line, "\"key\":\"visible-key\"")) << line;
  }

  const std::string sampled_log = dir.path() + "/sampled.jsonl";
  {
    DEDUP_START_SERVER(server,
                       {"--durability=none", "--event_log_sample_rate=0.5",
                        absl::StrCat("--event_log=", sampled_log)});
    DriveEvents(*server, "sampled-key");
  }
  EXPECT_EQ(ReadLines(sampled_log).size(), 2u) << "half of 4 events";
}

}  // namespace
}  // namespace dedup::testing
