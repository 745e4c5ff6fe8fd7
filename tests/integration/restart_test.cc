// What survives a restart: after SIGTERM everything, after SIGKILL (crash)
// every acknowledged write under sync durability; fences keep rising.

#include <algorithm>
#include <array>
#include <atomic>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/server_process.h"

namespace dedup::testing {
namespace {

using v1::BeginResponse;
using v1::CompleteResponse;
using v1::ReleaseResponse;

// Waits (up to 20 s) until the callers have counted `at_least`, then
// SIGKILLs `server` while they are still going, and stops and joins them.
void KillMidTraffic(ServerProcess& server, const std::atomic<int>& count,
                    int at_least, std::atomic<bool>& stop,
                    std::vector<std::thread>& callers) {
  for (int waited = 0; count.load() < at_least && waited < 20000; waited += 5) {
    SleepMs(5);
  }
  server.Kill();
  stop = true;
  for (std::thread& t : callers) t.join();
}

TEST(RestartTest, GracefulRestartKeepsRecordsAndFencesKeepRising) {
  DEDUP_START_SERVER(first);
  std::map<std::string, std::string> completed;  // key -> result
  std::map<std::string, uint64_t> fences;
  std::map<std::string, std::string> records;  // key -> serialized Record
  uint64_t max_fence = 0;
  {
    TestClient c(first->address());
    for (int i = 0; i < 5; ++i) {
      const std::string key = absl::StrCat("done-", i);
      const BeginResponse r = c.Begin(key, "a");
      ASSERT_EQ(r.status(), BeginResponse::STARTED);
      const v1::Outcome outcome = i % 2 ? v1::ERROR : v1::SUCCESS;
      ASSERT_EQ(c.Complete(key, r.fence(), "result-" + key, outcome).status(),
                CompleteResponse::OK);
      completed[key] = "result-" + key;
      fences[key] = r.fence();
      max_fence = std::max(max_fence, r.fence());
    }
    const BeginResponse flying = c.Begin("in-flight", "flyer");
    ASSERT_EQ(flying.status(), BeginResponse::STARTED);
    fences["in-flight"] = flying.fence();
    const BeginResponse rel = c.Begin("released", "a");
    ASSERT_EQ(rel.status(), BeginResponse::STARTED);
    ASSERT_EQ(c.Release("released", rel.fence()).status(), ReleaseResponse::OK);
    const BeginResponse gone = c.Begin("forgotten", "a");
    ASSERT_TRUE(c.Forget("forgotten").existed());
    max_fence =
        std::max({max_fence, flying.fence(), rel.fence(), gone.fence()});
    for (const auto& [key, result] : completed) {
      records[key] = c.Get(key).record().SerializeAsString();
    }
  }
  const absl::Status stopped = first->Stop();
  ASSERT_TRUE(stopped.ok()) << stopped;
  EXPECT_EQ(first->exit_code(), 0);

  // `first` owns the dir: it stays alive until the end of the test.
  DEDUP_START_SERVER(second, {}, first->data_dir());
  TestClient c(second->address());
  for (const auto& [key, result] : completed) {
    const BeginResponse dup = c.Begin(key, "b");
    EXPECT_EQ(dup.status(), BeginResponse::DUPLICATE) << key;
    EXPECT_EQ(dup.result(), result) << key;
    EXPECT_EQ(dup.fence(), fences[key]) << key;
    // Timestamps, attempts, outcome: all as they were.
    EXPECT_EQ(c.Get(key).record().SerializeAsString(), records[key]) << key;
  }
  EXPECT_EQ(c.Begin("done-1", "b").outcome(), v1::ERROR);

  // The in-flight claim survived with its lease: its owner can finish.
  const v1::GetResponse flying = c.Get("in-flight");
  ASSERT_TRUE(flying.found());
  EXPECT_EQ(flying.record().state(), v1::IN_FLIGHT);
  EXPECT_EQ(flying.record().fence(), fences["in-flight"]);
  EXPECT_EQ(flying.record().owner(), "flyer");
  EXPECT_EQ(c.Begin("in-flight", "other").status(), BeginResponse::IN_USE);
  EXPECT_EQ(c.Complete("in-flight", fences["in-flight"], "landed").status(),
            CompleteResponse::OK);

  const BeginResponse rebegun = c.Begin("released", "b");
  EXPECT_EQ(rebegun.status(), BeginResponse::STARTED);
  EXPECT_GT(rebegun.fence(), max_fence);
  EXPECT_FALSE(c.Get("forgotten").found());
  const BeginResponse reforgotten = c.Begin("forgotten", "b");
  EXPECT_EQ(reforgotten.status(), BeginResponse::STARTED);
  EXPECT_GT(reforgotten.fence(), max_fence);
  const BeginResponse fresh = c.Begin("brand-new", "b");
  EXPECT_EQ(fresh.status(), BeginResponse::STARTED);
  EXPECT_GT(fresh.fence(), max_fence);

  c.Disconnect();
  const absl::Status stopped_again = second->Stop();
  EXPECT_TRUE(stopped_again.ok()) << stopped_again;
}

// Writers run until the server is killed mid-stream; every Complete that was
// acknowledged before the kill must be there after the restart.
TEST(RestartTest, AcknowledgedCompletesSurviveSigkillWithSyncDurability) {
  DEDUP_START_SERVER(first);  // Default durability: sync.
  constexpr int kWriters = 16;
  constexpr int kMinAcked = 300;
  struct Acked {
    std::string key;
    uint64_t fence;
  };
  std::mutex mu;
  std::vector<Acked> acked;
  std::atomic<int> acked_count{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      TestClient c(first->address());
      for (int i = 0; !stop.load(); ++i) {
        const std::string key = absl::StrCat("crash-", w, "-", i);
        v1::BeginResponse began;
        if (!c.BeginStatus(c.BeginReq(key, "a"), &began).ok()) return;
        v1::CompleteRequest req;
        req.set_namespace_(c.ns());
        req.set_key(key);
        req.set_fence(began.fence());
        req.set_outcome(v1::SUCCESS);
        req.set_result("result-" + key);
        v1::CompleteResponse done;
        if (!c.CompleteStatus(req, &done).ok()) return;
        if (done.status() != CompleteResponse::OK) {
          ADD_FAILURE() << key << ": Complete answered " << done.status();
          return;
        }
        std::lock_guard<std::mutex> lock(mu);
        acked.push_back({key, began.fence()});
        ++acked_count;
      }
    });
  }
  // Some writes are in flight at the kill.
  KillMidTraffic(*first, acked_count, kMinAcked, stop, writers);
  EXPECT_EQ(first->exit_code(), 128 + 9);
  std::cerr << acked.size() << " Completes acknowledged before SIGKILL\n";
  ASSERT_GE(acked.size(), static_cast<size_t>(kMinAcked))
      << "too few writes before the kill to mean anything";

  DEDUP_START_SERVER(second, {}, first->data_dir());
  TestClient c(second->address());
  uint64_t max_fence = 0;
  int missing = 0;
  for (const Acked& a : acked) {
    max_fence = std::max(max_fence, a.fence);
    const BeginResponse dup = c.Begin(a.key, "after-crash");
    if (dup.status() != BeginResponse::DUPLICATE ||
        dup.result() != "result-" + a.key || dup.fence() != a.fence) {
      if (++missing <= 5) {
        ADD_FAILURE() << a.key << " was acknowledged but after the crash is "
                      << dup.ShortDebugString();
      }
    }
  }
  EXPECT_EQ(missing, 0) << "of " << acked.size() << " acknowledged";
  EXPECT_GT(c.Begin("after-crash-new-key", "b").fence(), max_fence);
  c.Disconnect();
  const absl::Status stopped = second->Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

// A read must not reveal what a crash could still erase: RocksDB shows a
// write before its WAL fsync, so whatever a Get reported before a SIGKILL (a
// claim or an outcome) must be there after the restart.
TEST(RestartTest, WhatReadsReportedBeforeSigkillSurvivesIt) {
  DEDUP_START_SERVER(first);  // Default durability: sync.
  constexpr int kWriters = 8;
  constexpr int kReaders = 8;
  constexpr int kMinSeen = 500;
  auto key_of = [](int writer, int i) {
    return absl::StrCat("seen-", writer, "-", i);
  };
  std::array<std::atomic<int>, kWriters> writing{};  // key index per writer
  std::mutex mu;
  std::map<std::string, bool> seen;  // key -> reported COMPLETED
  std::atomic<int> seen_count{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      TestClient c(first->address());
      for (int i = 0; !stop.load(); ++i) {
        writing[w].store(i);
        v1::BeginResponse began;
        if (!c.BeginStatus(c.BeginReq(key_of(w, i), "writer"), &began).ok()) {
          return;
        }
        v1::CompleteRequest req;
        req.set_namespace_(c.ns());
        req.set_key(key_of(w, i));
        req.set_fence(began.fence());
        req.set_outcome(v1::SUCCESS);
        v1::CompleteResponse done;
        if (!c.CompleteStatus(req, &done).ok()) return;
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      TestClient c(first->address());
      for (int n = r; !stop.load(); ++n) {
        const int w = n % kWriters;
        v1::GetRequest req;
        req.set_namespace_(c.ns());
        req.set_key(key_of(w, writing[w].load()));
        v1::GetResponse got;
        if (!c.GetStatus(req, &got).ok()) return;
        if (!got.found()) continue;
        const bool completed = got.record().state() == v1::COMPLETED;
        std::lock_guard<std::mutex> lock(mu);
        bool& reported = seen[req.key()];
        reported = reported || completed;
        ++seen_count;
      }
    });
  }
  KillMidTraffic(*first, seen_count, kMinSeen, stop, threads);
  ASSERT_GE(seen_count.load(), kMinSeen)
      << "too few reads before the kill to mean anything";

  DEDUP_START_SERVER(second, {}, first->data_dir());
  TestClient c(second->address());
  int lost = 0;
  for (const auto& [key, completed] : seen) {
    const v1::GetResponse got = c.Get(key);
    const bool ok =
        got.found() && (!completed || got.record().state() == v1::COMPLETED);
    if (!ok && ++lost <= 5) {
      ADD_FAILURE() << key << " was reported "
                    << (completed ? "COMPLETED" : "IN_FLIGHT")
                    << " before the crash, and after it is "
                    << got.ShortDebugString();
    }
  }
  EXPECT_EQ(lost, 0) << "of " << seen.size() << " keys reads reported";
  c.Disconnect();
  const absl::Status stopped = second->Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace dedup::testing
