// A SharedDedupdTest (tests/testing/shared_server.h) whose tests each get a
// dedup::Client on the suite's dedupd. Derived still supplies Flags().
#ifndef DEDUP_TESTS_CLIENT_SHARED_CLIENT_H_
#define DEDUP_TESTS_CLIENT_SHARED_CLIENT_H_

#include <memory>
#include <string>

#include "client/dedup_client.h"
#include "tests/testing/shared_server.h"

namespace dedup {

template <typename Derived>
class SharedClientTest : public testing::SharedDedupdTest<Derived> {
 protected:
  using Base = testing::SharedDedupdTest<Derived>;

  void SetUp() override {
    Base::SetUp();
    if (this->HasFatalFailure()) return;
    client_ = std::make_unique<Client>(Base::server().address());
  }

  // A key unique to the running test (its name plus `suffix`).
  static std::string Key(const std::string& suffix = "") {
    return Base::TestName() + suffix;
  }

  std::unique_ptr<Client> client_;
};

}  // namespace dedup

#endif  // DEDUP_TESTS_CLIENT_SHARED_CLIENT_H_
