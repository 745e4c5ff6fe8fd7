// common/log: the line formats (JSON by default, text for people) that
// operators' log processors and tests rely on, levels, and whole lines under
// concurrent callers.
#include "common/log.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/civil_time.h"
#include "gtest/gtest.h"

namespace dedup {
namespace {

absl::Time FixedTime() {
  return absl::FromCivil(absl::CivilSecond(2026, 11, 27, 8, 44, 9),
                         absl::UTCTimeZone()) +
         absl::Microseconds(1234);
}

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override { SetLogClockForTesting(&FixedTime); }
  void TearDown() override {
    SetLogLevel(LogLevel::kInfo);
    SetLogFormat(LogFormat::kJson);
    SetLogClockForTesting(nullptr);
  }
};

TEST_F(LogTest, WritesOneJsonObjectPerCall) {
  ::testing::internal::CaptureStderr();
  LogInfo("tenants file ", "/x", " loaded: ", 3, " tenants");
  LogAnnouncement("server", "listening", "listening on 127.0.0.1:1",
                  {{"address", "127.0.0.1:1"}});
  Log(LogLevel::kError, "rocksdb", "[db] disk \"full\"\n\\ \x01");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "{\"ts\":\"2026-11-27T08:44:09.001234Z\",\"level\":\"info\","
            "\"component\":\"dedupd\",\"msg\":\"tenants file /x loaded: 3 "
            "tenants\"}\n"
            "{\"ts\":\"2026-11-27T08:44:09.001234Z\",\"level\":\"info\","
            "\"component\":\"server\",\"msg\":\"listening on 127.0.0.1:1\","
            "\"event\":\"listening\",\"address\":\"127.0.0.1:1\"}\n"
            "{\"ts\":\"2026-11-27T08:44:09.001234Z\",\"level\":\"error\","
            "\"component\":\"rocksdb\",\"msg\":\"[db] disk \\\"full\\\"\\n"
            "\\\\ \\u0001\"}\n");
}

TEST_F(LogTest, KeepsValidUtf8AndReplacesInvalidBytes) {
  ::testing::internal::CaptureStderr();
  Log(LogLevel::kInfo, "server", "caf\xC3\xA9 \xF0\x9F\x94\x92 \xFF\xC3 end");
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("\"msg\":\"caf\xC3\xA9 \xF0\x9F\x94\x92 "
                     "\\ufffd\\ufffd end\""),
            std::string::npos)
      << out;
}

TEST_F(LogTest, WritesTextLinesWhenAsked) {
  SetLogFormat(LogFormat::kText);
  ::testing::internal::CaptureStderr();
  LogWarning("slow disk");
  LogAnnouncement("server", "metrics", "metrics on 127.0.0.1:2",
                  {{"address", "127.0.0.1:2"}});
  Log(LogLevel::kError, "grpc", "two\nlines");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "2026-11-27T08:44:09.001234Z WARNING dedupd: slow disk\n"
            "2026-11-27T08:44:09.001234Z INFO server: metrics on 127.0.0.1:2 "
            "event=metrics address=127.0.0.1:2\n"
            "2026-11-27T08:44:09.001234Z ERROR grpc: two\\nlines\n");
}

TEST_F(LogTest, DropsLinesBelowTheLevel) {
  SetLogLevel(LogLevel::kWarning);
  SetLogFormat(LogFormat::kText);
  ::testing::internal::CaptureStderr();
  LogDebug("debug");
  LogInfo("info");
  LogWarning("warning");
  LogError("error");
  LogAnnouncement("server", "listening", "always");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "2026-11-27T08:44:09.001234Z WARNING dedupd: warning\n"
            "2026-11-27T08:44:09.001234Z ERROR dedupd: error\n"
            "2026-11-27T08:44:09.001234Z INFO server: always "
            "event=listening\n");
}

TEST_F(LogTest, ParsesLevelAndFormatNames) {
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("info"), LogLevel::kInfo);
  EXPECT_EQ(*ParseLogLevel("warning"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  EXPECT_FALSE(ParseLogLevel("loud").ok());
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_FALSE(ParseLogFormat("xml").ok());
}

TEST_F(LogTest, TakesTheTimeFromTheRealClockByDefault) {
  SetLogClockForTesting(nullptr);
  const absl::Time before = absl::Now();
  ::testing::internal::CaptureStderr();
  LogInfo("now");
  const std::string out = ::testing::internal::GetCapturedStderr();
  const std::string prefix = "{\"ts\":\"";
  ASSERT_EQ(out.substr(0, prefix.size()), prefix) << out;
  absl::Time ts;
  std::string error;
  ASSERT_TRUE(absl::ParseTime("%Y-%m-%dT%H:%M:%E6SZ",
                              out.substr(prefix.size(), 27), &ts, &error))
      << out << " " << error;
  EXPECT_GE(ts, before - absl::Microseconds(1));
  EXPECT_LE(ts, absl::Now());
}

TEST_F(LogTest, ConcurrentLinesDoNotInterleave) {
  constexpr int kThreads = 8;
  constexpr int kLines = 200;
  const std::string body(300, 'x');
  ::testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&body, t] {
      for (int i = 0; i < kLines; ++i) LogInfo(t, ":", body);
    });
  }
  for (std::thread& t : threads) t.join();
  const std::string out = ::testing::internal::GetCapturedStderr();
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLines));
  const std::string head =
      "{\"ts\":\"2026-11-27T08:44:09.001234Z\",\"level\":\"info\","
      "\"component\":\"dedupd\",\"msg\":\"";
  for (const std::string& line : lines) {
    ASSERT_EQ(line.size(), head.size() + 2 + body.size() + 2) << line;
    ASSERT_EQ(line.substr(0, head.size()), head) << line;
  }
}

}  // namespace
}  // namespace dedup
