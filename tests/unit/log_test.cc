// common/log: the line format dedupd's output and tests rely on, levels, and
// whole lines under concurrent callers.
#include "common/log.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace dedup {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void TearDown() override { SetLogLevel(LogLevel::kInfo); }
};

TEST_F(LogTest, WritesOnePrefixedLinePerCall) {
  ::testing::internal::CaptureStderr();
  LogInfo("tenants file ", "/x", " loaded: ", 3, " tenants");
  LogAnnouncement("listening on 127.0.0.1:1");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "dedupd: tenants file /x loaded: 3 tenants\n"
            "dedupd listening on 127.0.0.1:1\n");
}

TEST_F(LogTest, DropsLinesBelowTheLevel) {
  SetLogLevel(LogLevel::kWarning);
  ::testing::internal::CaptureStderr();
  LogDebug("debug");
  LogInfo("info");
  LogWarning("warning");
  LogError("error");
  LogAnnouncement("always");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "dedupd: warning\ndedupd: error\ndedupd always\n");
}

TEST_F(LogTest, ParsesLevelNames) {
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("info"), LogLevel::kInfo);
  EXPECT_EQ(*ParseLogLevel("warning"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  EXPECT_FALSE(ParseLogLevel("loud").ok());
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
  std::vector<std::string> lines =
      absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLines));
  for (const std::string& line : lines) {
    ASSERT_EQ(line.size(), std::string("dedupd: 0:").size() + body.size())
        << line;
  }
}

}  // namespace
}  // namespace dedup
