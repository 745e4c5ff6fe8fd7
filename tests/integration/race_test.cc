// Many callers racing Begin on the same fresh key: exactly one owns it.

#include <algorithm>
#include <condition_variable>
#include <functional>
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

// C++17 has no std::barrier. Reusable: each round is a new generation.
class Barrier {
 public:
  explicit Barrier(int parties) : parties_(parties) {}
  void ArriveAndWait() {
    std::unique_lock<std::mutex> lock(mu_);
    const int generation = generation_;
    if (++arrived_ == parties_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int parties_;
  int arrived_ = 0;
  int generation_ = 0;
};

struct Answer {
  bool rpc_ok = false;
  int status = 0;  // The response's Status enum.
  uint64_t fence = 0;
  bool takeover = false;
  std::string error;
};

using Call = std::function<Answer(v1::Dedup::Stub*, int thread, int round)>;

// Runs `threads` callers through `rounds` rounds; a barrier releases each
// round's calls together. Returns answers[round * threads + thread].
std::vector<Answer> RunRounds(const ServerProcess& server, int threads,
                              int rounds, const Call& call) {
  // A few connections shared by all callers: enough to spread the load over
  // the server's pollers without one channel per thread.
  constexpr int kChannels = 8;
  std::vector<std::unique_ptr<v1::Dedup::Stub>> stubs;
  for (int i = 0; i < kChannels; ++i) {
    stubs.push_back(NewStub(server.address()));
  }
  std::vector<Answer> answers(static_cast<size_t>(threads) * rounds);
  Barrier barrier(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) {
        barrier.ArriveAndWait();
        answers[static_cast<size_t>(r) * threads + t] =
            call(stubs[t % kChannels].get(), t, r);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  return answers;
}

Answer RaceBegin(v1::Dedup::Stub* stub, const std::string& key, int thread) {
  v1::BeginRequest req;
  req.set_namespace_("race");
  req.set_key(key);
  req.set_owner(absl::StrCat("owner-", thread));
  req.set_args_hash("same-args");
  grpc::ClientContext ctx;
  SetDeadline(&ctx, 30000);
  BeginResponse resp;
  const grpc::Status s = stub->Begin(&ctx, req, &resp);
  return {s.ok(), resp.status(), resp.fence(), resp.takeover(),
          s.error_message()};
}

// Checks one round of racing Begins: exactly one STARTED (with `takeover` as
// given and a fence above `min_fence`), everyone else IN_USE with the
// winner's fence (the fence of the current execution).
bool CheckOneWinner(const std::vector<Answer>& answers, int threads, int round,
                    bool takeover, uint64_t min_fence) {
  int started = 0, in_use = 0, other = 0, wrong_fence = 0;
  uint64_t winner_fence = 0;
  std::string error;
  for (int t = 0; t < threads; ++t) {
    const Answer& a = answers[static_cast<size_t>(round) * threads + t];
    if (!a.rpc_ok) {
      error = a.error;
      ++other;
    } else if (a.status == BeginResponse::STARTED) {
      ++started;
      winner_fence = a.fence;
      if (a.takeover != takeover) ++other;
    } else if (a.status == BeginResponse::IN_USE) {
      ++in_use;
    } else {
      ++other;
    }
  }
  for (int t = 0; t < threads; ++t) {
    const Answer& a = answers[static_cast<size_t>(round) * threads + t];
    if (a.rpc_ok && a.status == BeginResponse::IN_USE &&
        a.fence != winner_fence) {
      ++wrong_fence;
    }
  }
  const bool good = started == 1 && in_use == threads - 1 && other == 0 &&
                    winner_fence > min_fence && wrong_fence == 0;
  EXPECT_TRUE(good) << "round " << round << ": STARTED " << started
                    << ", IN_USE " << in_use << ", other/wrong takeover/rpc "
                    << "errors " << other << " (" << error << ")"
                    << ", winner fence " << winner_fence << " (must be > "
                    << min_fence << "), IN_USE with another fence "
                    << wrong_fence;
  return good;
}

// In each round every caller Begins the round's fresh key with its own owner
// and the same args_hash.
void RunBeginRace(const ServerProcess& server, int threads, int rounds) {
  const std::vector<Answer> answers =
      RunRounds(server, threads, rounds, [](auto* stub, int t, int r) {
        return RaceBegin(stub, absl::StrCat("round-", r), t);
      });
  int bad_rounds = 0;
  for (int r = 0; r < rounds && bad_rounds < 5; ++r) {
    if (!CheckOneWinner(answers, threads, r, /*takeover=*/false, 0)) {
      ++bad_rounds;
    }
  }
}

TEST(RaceTest, OneWinnerPerKeyWithoutDurability) {
  DEDUP_START_SERVER(server, {"--durability=none"});
  RunBeginRace(*server, /*threads=*/64, /*rounds=*/200);
  const absl::Status stopped = server->Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

// The default durability sends STARTED only after a synced write, through
// the group commit path.
TEST(RaceTest, OneWinnerPerKeyWithSyncDurability) {
  DEDUP_START_SERVER(server);
  RunBeginRace(*server, /*threads=*/64, /*rounds=*/20);
  const absl::Status stopped = server->Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST(RaceTest, OneCallerTakesOverAnExpiredLease) {
  DEDUP_START_SERVER(server, {"--durability=none"});
  constexpr int kThreads = 64, kKeys = 10;
  TestClient c(server->address(), "race");
  std::vector<uint64_t> fences;
  int64_t last_lease_end = 0;
  for (int k = 0; k < kKeys; ++k) {
    v1::BeginRequest req =
        c.BeginReq(absl::StrCat("expiring-", k), "first", "same-args");
    req.set_lease_ms(100);
    const BeginResponse r = c.Begin(req);
    ASSERT_EQ(r.status(), BeginResponse::STARTED);
    fences.push_back(r.fence());
    last_lease_end = std::max(last_lease_end, r.lease_expires_at());
  }
  SleepMs(std::max<int64_t>(last_lease_end - NowMs(), 0) + 50);
  const std::vector<Answer> answers =
      RunRounds(*server, kThreads, kKeys, [](auto* stub, int t, int r) {
        return RaceBegin(stub, absl::StrCat("expiring-", r), t);
      });
  for (int k = 0; k < kKeys; ++k) {
    CheckOneWinner(answers, kThreads, k, /*takeover=*/true, fences[k]);
  }
}

// Many Completes of one fence at once: identical ones all succeed (Complete
// is idempotent); differing ones leave exactly one stored result.
TEST(RaceTest, ConcurrentCompletesOfOneFence) {
  DEDUP_START_SERVER(server, {"--durability=none"});
  constexpr int kThreads = 32, kRounds = 40;
  TestClient c(server->address(), "race");
  std::vector<uint64_t> fences;
  for (int r = 0; r < kRounds; ++r) {
    const BeginResponse b =
        c.Begin(c.BeginReq(absl::StrCat("complete-", r), "owner", "same-args"));
    ASSERT_EQ(b.status(), BeginResponse::STARTED);
    fences.push_back(b.fence());
  }
  // Even rounds: every caller sends the same result; odd rounds: its own.
  auto result_of = [](int t, int r) {
    return r % 2 == 0 ? std::string("same") : absl::StrCat("mine-", t);
  };
  const std::vector<Answer> answers =
      RunRounds(*server, kThreads, kRounds, [&](auto* stub, int t, int r) {
        v1::CompleteRequest req;
        req.set_namespace_("race");
        req.set_key(absl::StrCat("complete-", r));
        req.set_fence(fences[r]);
        req.set_outcome(v1::SUCCESS);
        req.set_result(result_of(t, r));
        grpc::ClientContext ctx;
        SetDeadline(&ctx, 30000);
        v1::CompleteResponse resp;
        const grpc::Status s = stub->Complete(&ctx, req, &resp);
        return Answer{s.ok(), resp.status(), resp.fence(), false,
                      s.error_message()};
      });
  for (int r = 0; r < kRounds; ++r) {
    int ok = 0, already = 0, other = 0, winner = -1;
    for (int t = 0; t < kThreads; ++t) {
      const Answer& a = answers[static_cast<size_t>(r) * kThreads + t];
      if (a.rpc_ok && a.status == v1::CompleteResponse::OK) {
        ++ok;
        winner = t;
      } else if (a.rpc_ok &&
                 a.status == v1::CompleteResponse::ALREADY_COMPLETED) {
        ++already;
      } else {
        ++other;
        ADD_FAILURE() << "round " << r << " thread " << t << ": rpc_ok "
                      << a.rpc_ok << ", status " << a.status << ", error '"
                      << a.error << "'";
      }
    }
    const v1::GetResponse got = c.Get(absl::StrCat("complete-", r));
    if (r % 2 == 0) {
      EXPECT_EQ(ok, kThreads) << "round " << r << ": ALREADY_COMPLETED "
                              << already << ", other " << other;
      EXPECT_EQ(got.record().result(), "same");
    } else {
      EXPECT_EQ(ok, 1) << "round " << r;
      EXPECT_EQ(already, kThreads - 1) << "round " << r;
      if (winner >= 0) {
        EXPECT_EQ(got.record().result(), result_of(winner, r))
            << "round " << r
            << ": the stored result is not the one answered OK";
      }
    }
    EXPECT_EQ(got.record().state(), v1::COMPLETED);
  }
}

}  // namespace
}  // namespace dedup::testing
