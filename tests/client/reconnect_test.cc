// A Client whose dedupd crashed and came back on the same port and data dir
// is answered again promptly, though its calls failed fast meanwhile: its
// channels reconnect on a short backoff (common/reconnect_backoff.h), not
// gRPC's default one (1 s, growing 1.6x to 120 s). The Python client's
// equivalent is tests/python/integration/test_reconnect.py.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/dedup_client.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"

namespace dedup {
namespace {

using testing::ServerProcess;

// What the test allows between the server listening again and the first
// call it answers.
constexpr absl::Duration kReconnectLimit = absl::Seconds(2);

class ReconnectTest : public ::testing::TestWithParam<absl::Duration> {};

// The server is down for GetParam(), while the client keeps calling.
TEST_P(ReconnectTest, NextCallSucceedsSoonAfterARestart) {
  const std::string address =
      absl::StrCat("127.0.0.1:", testing::FreePort("127.0.0.1"));
  const std::vector<std::string> flags = {absl::StrCat("--address=", address),
                                          "--durability=none",
                                          "--event_log=off"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> first =
      ServerProcess::Start(flags);
  ASSERT_TRUE(first.ok()) << first.status();
  // One attempt per call: each call says whether the server answered at
  // that moment, without the client's own retries.
  ClientOptions options;
  options.max_attempts = 1;
  options.deadline = absl::Seconds(1);
  Client client(address, options);
  absl::StatusOr<v1::GetResponse> got = client.Get("reconnect", "k");
  ASSERT_TRUE(got.ok()) << got.status();

  (*first)->Kill();
  const absl::Time down = absl::Now();
  int failed = 0;
  do {  // the calls made while it is down fail at once
    got = client.Get("reconnect", "k");
    ASSERT_EQ(got.status().code(), absl::StatusCode::kUnavailable)
        << got.status();
    ++failed;
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() - down < GetParam());
  EXPECT_GE(failed, 2);

  // Declared after `first`, which owns the data dir: destroyed before it.
  absl::StatusOr<std::unique_ptr<ServerProcess>> second =
      ServerProcess::Start(flags, (*first)->data_dir());
  ASSERT_TRUE(second.ok()) << second.status();
  const absl::Time listening = absl::Now();  // ready file written just now
  absl::Duration took = absl::InfiniteDuration();
  while (absl::Now() - listening < absl::Seconds(15)) {
    got = client.Get("reconnect", "k");
    if (got.ok()) {
      took = absl::Now() - listening;
      break;
    }
    ASSERT_EQ(got.status().code(), absl::StatusCode::kUnavailable)
        << got.status();
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_NE(took, absl::InfiniteDuration()) << "no call got through in 15 s";
  // The figure, for comparing gRPC settings (it passes or not either way).
  std::cout << "outage " << GetParam() << ": first success " << took
            << " after the restart\n";
  EXPECT_LT(took, kReconnectLimit)
      << "after a " << GetParam() << " outage, the first call got through "
      << took << " after the restart";
}

INSTANTIATE_TEST_SUITE_P(Outages, ReconnectTest,
                         ::testing::Values(absl::Milliseconds(250),
                                           absl::Seconds(3)),
                         [](const ::testing::TestParamInfo<absl::Duration>& p) {
                           return absl::StrCat(
                               absl::ToInt64Milliseconds(p.param), "ms");
                         });

}  // namespace
}  // namespace dedup
