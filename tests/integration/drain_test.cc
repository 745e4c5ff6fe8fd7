// SIGTERM under load: many callers, each on a connection of its own, keep
// sending Begin and Complete while dedupd stops. Every call gets its answer
// or UNAVAILABLE (which clients retry), never CANCELLED (which they do not),
// and every acknowledged Complete is there after the restart.

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/server_process.h"

namespace dedup::testing {
namespace drain_test {
namespace {

constexpr int kCallers = 48;
constexpr int kRounds = 3;

// What the callers saw in one round.
struct Tally {
  std::mutex mu;
  std::map<std::pair<std::string, grpc::StatusCode>, int> codes;
  std::vector<std::string> acknowledged;  // keys whose Complete said OK
  std::atomic<int> calls{0};

  void Count(absl::string_view method, const grpc::Status& s) {
    ++calls;
    std::lock_guard<std::mutex> lock(mu);
    ++codes[{std::string(method), s.error_code()}];
  }
};

template <typename Request, typename Response>
grpc::Status Call(v1::Dedup::Stub& stub,
                  grpc::Status (v1::Dedup::Stub::*method)(grpc::ClientContext*,
                                                          const Request&,
                                                          Response*),
                  const Request& request, Response* response) {
  grpc::ClientContext context;
  // No wait_for_ready: once dedupd is gone a call fails UNAVAILABLE at once.
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  return (stub.*method)(&context, request, response);
}

// Begin then Complete on fresh keys until `stop`, as fast as it can.
void RunCaller(const std::string& address, int round, int caller,
               const std::atomic<bool>& stop, Tally* tally) {
  std::unique_ptr<v1::Dedup::Stub> stub = NewStub(address);
  for (int i = 0; !stop.load(); ++i) {
    const std::string key = absl::StrCat("r", round, "-c", caller, "-", i);
    v1::BeginRequest begin;
    begin.set_namespace_("drain");
    begin.set_key(key);
    begin.set_owner(key);
    v1::BeginResponse begun;
    grpc::Status s = Call(*stub, &v1::Dedup::Stub::Begin, begin, &begun);
    tally->Count("Begin", s);
    if (!s.ok()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    v1::CompleteRequest complete;
    complete.set_namespace_("drain");
    complete.set_key(key);
    complete.set_fence(begun.fence());
    complete.set_outcome(v1::SUCCESS);
    complete.set_result(key);
    v1::CompleteResponse completed;
    s = Call(*stub, &v1::Dedup::Stub::Complete, complete, &completed);
    tally->Count("Complete", s);
    if (s.ok() && completed.status() == v1::CompleteResponse::OK) {
      std::lock_guard<std::mutex> lock(tally->mu);
      tally->acknowledged.push_back(key);
    }
  }
}

TEST(DrainTest, SigtermUnderLoadAnswersEveryCallOrUnavailable) {
  DEDUP_START_SERVER(first);
  const std::string data_dir = first->data_dir();  // owned by `first`
  std::unique_ptr<ServerProcess> server = std::move(first);
  std::vector<std::unique_ptr<ServerProcess>> stopped;
  std::vector<std::string> acknowledged;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    Tally tally;
    std::atomic<bool> stop{false};
    std::vector<std::thread> callers;
    for (int c = 0; c < kCallers; ++c) {
      callers.emplace_back(RunCaller, server->address(), round, c,
                           std::cref(stop), &tally);
    }
    for (int waited = 0; tally.calls.load() < 2000 && waited < 20000;
         waited += 5) {
      SleepMs(5);
    }
    const int before_signal = tally.calls.load();
    const absl::Status s = server->Stop();
    EXPECT_TRUE(s.ok()) << s << server->captured_stderr();
    const int until_exit = tally.calls.load();
    SleepMs(100);  // calls to a closed port
    stop = true;
    for (std::thread& t : callers) t.join();
    // The signal came while calls were still being made.
    EXPECT_GT(until_exit, before_signal);
    for (const auto& [what, n] : tally.codes) {
      const auto& [method, code] = what;
      EXPECT_TRUE(code == grpc::StatusCode::OK ||
                  code == grpc::StatusCode::UNAVAILABLE)
          << method << " answered code " << code << " x" << n
          << " (1 is CANCELLED)";
    }
    EXPECT_GT((tally.codes[{"Complete", grpc::StatusCode::OK}]), 0);
    acknowledged.insert(acknowledged.end(), tally.acknowledged.begin(),
                        tally.acknowledged.end());

    stopped.push_back(std::move(server));
    auto restarted = ServerProcess::Start({}, data_dir);
    ASSERT_TRUE(restarted.ok()) << restarted.status();
    server = *std::move(restarted);
    TestClient check(server->address(), "drain");
    for (const std::string& key : tally.acknowledged) {
      const v1::BeginResponse again =
          check.Begin(check.BeginReq(key, "someone-else", /*args_hash=*/""));
      ASSERT_EQ(again.status(), v1::BeginResponse::DUPLICATE) << key;
      ASSERT_EQ(again.result(), key);
    }
  }
  EXPECT_GT(acknowledged.size(), 0u);
}

}  // namespace
}  // namespace drain_test
}  // namespace dedup::testing
