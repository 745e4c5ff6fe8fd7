// The two health watches alone, on a recording health service: readiness
// (HealthWatch) sets "" and the named services and never liveness;
// liveness (LivenessWatch) follows a heartbeat, fails once it stops for
// `wedged_after`, recovers when it moves again, and pings only while alive.
// And SdNotifier's reading of the environment.

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/health_watch.h"
#include "server/liveness_watch.h"
#include "server/sd_notify.h"

namespace dedup {
namespace {

// What a listener's health service was last told, per service name.
class RecordingHealth : public grpc::HealthCheckServiceInterface {
 public:
  void SetServingStatus(const std::string& service, bool serving) override {
    absl::MutexLock lock(&mu_);
    status_[service] = serving;
  }
  void SetServingStatus(bool serving) override {
    absl::MutexLock lock(&mu_);
    for (auto& [name, status] : status_) status = serving;
    status_[""] = serving;
  }
  void Shutdown() override {}

  // nullopt-like: -1 when never set, else 0/1.
  int Of(const std::string& service) {
    absl::MutexLock lock(&mu_);
    auto it = status_.find(service);
    return it == status_.end() ? -1 : it->second;
  }

  // Waits up to `timeout` for `service` to be `want`.
  bool Becomes(const std::string& service, int want,
               absl::Duration timeout = absl::Seconds(5)) {
    const absl::Time end = absl::Now() + timeout;
    while (absl::Now() < end) {
      if (Of(service) == want) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return Of(service) == want;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, bool> status_ ABSL_GUARDED_BY(mu_);
};

TEST(HealthWatchTest, ReadinessNeverTouchesLiveness) {
  RecordingHealth health;
  health.SetServingStatus(kLivenessService, true);
  std::atomic<bool> writable{true};
  HealthWatch watch(
      [&] {
        return writable.load() ? absl::OkStatus()
                               : absl::UnavailableError("disk full");
      },
      {&health}, {"dedup.v1.Dedup"}, absl::Milliseconds(5));
  writable = false;
  EXPECT_TRUE(health.Becomes("", 0));
  EXPECT_TRUE(health.Becomes("dedup.v1.Dedup", 0));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(health.Of(kLivenessService), 1);
  writable = true;
  EXPECT_TRUE(health.Becomes("", 1));
  EXPECT_TRUE(health.Becomes("dedup.v1.Dedup", 1));
}

TEST(LivenessWatchTest, WedgedOnceTheHeartbeatStopsAliveWhenItMovesAgain) {
  RecordingHealth a;
  RecordingHealth b;
  a.SetServingStatus("", false);  // readiness: not its business
  std::atomic<uint64_t> beat{0};
  std::atomic<bool> beating{true};
  std::atomic<int> pings{0};
  std::thread heart([&] {
    for (int i = 0; i < 400; ++i) {
      if (beating) ++beat;
      absl::SleepFor(absl::Milliseconds(5));
    }
  });
  LivenessOptions options;
  options.interval = absl::Milliseconds(5);
  options.wedged_after = absl::Milliseconds(200);
  options.alive_every = absl::Milliseconds(20);
  options.on_alive = [&] { ++pings; };
  {
    LivenessWatch watch([&] { return beat.load(); }, {&a, &b}, options);
    EXPECT_EQ(a.Of(kLivenessService), 1);
    absl::SleepFor(absl::Milliseconds(300));
    EXPECT_FALSE(watch.wedged());
    EXPECT_EQ(a.Of(kLivenessService), 1);
    EXPECT_GE(pings.load(), 5);

    beating = false;
    EXPECT_TRUE(a.Becomes(kLivenessService, 0));
    EXPECT_TRUE(b.Becomes(kLivenessService, 0));
    EXPECT_TRUE(watch.wedged());
    const int pings_when_wedged = pings.load();
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_EQ(pings.load(), pings_when_wedged) << "keepalives while wedged";
    EXPECT_EQ(a.Of(""), 0);  // untouched

    beating = true;
    EXPECT_TRUE(a.Becomes(kLivenessService, 1));
    EXPECT_TRUE(b.Becomes(kLivenessService, 1));
    EXPECT_FALSE(watch.wedged());
  }
  heart.join();
}

// Not wedged merely because nothing changes within `wedged_after` of the
// start: the clock starts at construction.
TEST(LivenessWatchTest, AliveUntilWedgedAfterHasPassed) {
  RecordingHealth health;
  LivenessOptions options;
  options.interval = absl::Milliseconds(5);
  options.wedged_after = absl::Milliseconds(300);
  LivenessWatch watch([] { return uint64_t{7}; }, {&health}, options);
  absl::SleepFor(absl::Milliseconds(150));
  EXPECT_EQ(health.Of(kLivenessService), 1);
  EXPECT_TRUE(health.Becomes(kLivenessService, 0));
}

class EnvTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
  }
};

TEST_F(EnvTest, NoSocketNoNotifications) {
  const SdNotifier notifier = SdNotifier::FromEnvironment();
  EXPECT_FALSE(notifier.enabled());
  EXPECT_TRUE(notifier.Notify("READY=1").ok());
  EXPECT_EQ(notifier.watchdog_timeout(), absl::ZeroDuration());
}

TEST_F(EnvTest, WatchdogOnlyForThisProcess) {
  setenv("NOTIFY_SOCKET", "@x", 1);
  setenv("WATCHDOG_USEC", "3000000", 1);
  EXPECT_EQ(SdNotifier::FromEnvironment().watchdog_timeout(), absl::Seconds(3));
  setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
  EXPECT_EQ(SdNotifier::FromEnvironment().watchdog_timeout(), absl::Seconds(3));
  setenv("WATCHDOG_PID", std::to_string(getpid() + 1).c_str(), 1);
  EXPECT_EQ(SdNotifier::FromEnvironment().watchdog_timeout(),
            absl::ZeroDuration());
  unsetenv("WATCHDOG_PID");
  setenv("WATCHDOG_USEC", "soon", 1);
  EXPECT_EQ(SdNotifier::FromEnvironment().watchdog_timeout(),
            absl::ZeroDuration());
}

TEST_F(EnvTest, ARelativePathOrNobodyListeningIsAnError) {
  EXPECT_EQ(
      SdNotifier("run/notify", absl::ZeroDuration()).Notify("READY=1").code(),
      absl::StatusCode::kInvalidArgument);
  const absl::Status s =
      SdNotifier("/nonexistent/notify.sock", absl::ZeroDuration())
          .Notify("READY=1");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent/notify.sock"), std::string::npos)
      << s;
}

}  // namespace
}  // namespace dedup
