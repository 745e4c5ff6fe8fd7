#include "common/thread_name.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dedup {
namespace {

// What the kernel reports for the calling thread.
std::string OwnComm() {
  std::ifstream in(
      absl::StrCat("/proc/self/task/", syscall(SYS_gettid), "/comm"));
  std::string name;
  std::getline(in, name);
  return name;
}

TEST(ThreadNameTest, NamesOnlyTheCallingThread) {
  const std::string before = OwnComm();
  std::string seen;
  std::thread([&seen] {
    NameThisThread("dedup-raft-loop");
    seen = OwnComm();
  }).join();
  EXPECT_EQ(seen, "dedup-raft-loop");
  EXPECT_EQ(OwnComm(), before);
}

TEST(ThreadNameTest, LongNamesAreCutToFifteenBytes) {
  std::string seen;
  std::thread([&seen] {
    NameThisThread("dedup-a-name-longer-than-fifteen");
    seen = OwnComm();
  }).join();
  EXPECT_EQ(seen, "dedup-a-name-lo");
}

}  // namespace
}  // namespace dedup
