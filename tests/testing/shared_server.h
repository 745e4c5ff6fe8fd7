// A fixture base for suites whose tests share one real dedupd: started once
// per suite with Derived::Flags() (a static function returning
// std::vector<std::string>), stopped with SIGTERM after the last test, which
// doubles as a check that the server drains and exits cleanly.
#ifndef DEDUP_TESTS_TESTING_SHARED_SERVER_H_
#define DEDUP_TESTS_TESTING_SHARED_SERVER_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"

namespace dedup::testing {

template <typename Derived>
class SharedDedupdTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<ServerProcess>> s =
        ServerProcess::Start(Derived::Flags());
    if (s.ok()) {
      server_ = *std::move(s);
    } else {
      start_error_ = s.status().ToString();
    }
  }
  static void TearDownTestSuite() {
    if (server_ == nullptr) return;
    const absl::Status stopped = server_->Stop();
    EXPECT_TRUE(stopped.ok()) << stopped;
    server_.reset();
  }

 protected:
  // Derived fixtures call this first and return on a fatal failure.
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "dedupd did not start: " << start_error_;
  }

  static ServerProcess& server() { return *server_; }

  // The running test's name: unique per test, so keys built from it never
  // collide between tests sharing the server.
  static std::string TestName() {
    return ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

 private:
  inline static std::unique_ptr<ServerProcess> server_;
  inline static std::string start_error_;
};

}  // namespace dedup::testing

#endif  // DEDUP_TESTS_TESTING_SHARED_SERVER_H_
