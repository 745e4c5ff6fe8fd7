// A follower that installs a large snapshot stays a member of the group: the
// leader is stopped (SIGSTOP) while the follower fetches its checkpoint, and
// the other two nodes elect a leader at once, take writes once the follower
// has fetched the state from the remaining node, and every replica ends with
// the same state after the old leader resumes.
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"

namespace dedup {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kResultBytes = 512 << 10;
constexpr int kLargeKeys = 220;  // 110 MiB of results
constexpr uint64_t kMinSnapshotBytes = 100ull << 20;

class SnapshotFailoverTest : public ClusterTest {
 protected:
  SnapshotFailoverTest()
      : ClusterTest({"--snapshot_threshold=16", "--snapshot_trailing=16",
                     "--checkpoint_fetch_stall_s=5"}) {}

  // Incompressible bytes, so that the state on disk is as large as written.
  static std::string RandomBytes(std::mt19937_64& rng, size_t n) {
    std::string out(n, '\0');
    for (size_t i = 0; i + 8 <= n; i += 8) {
      const uint64_t v = rng();
      std::memcpy(&out[i], &v, 8);
    }
    return out;
  }

  static uint64_t DirBytes(const std::string& dir) {
    uint64_t total = 0;
    std::error_code ec;
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(dir, ec)) {
      if (entry.is_regular_file(ec)) total += entry.file_size(ec);
    }
    return total;
  }

  // The leader as node `id` reports it (0: none), or -1 when it does not
  // answer.
  int64_t LeaderSeenBy(int id) {
    absl::StatusOr<v1::ClusterStatusResponse> status = cluster_.Status(id);
    return status.ok() ? static_cast<int64_t>(status->leader_id()) : -1;
  }
};

TEST_F(SnapshotFailoverTest, LeaderStoppedMidTransferIsReplacedAtOnce) {
  const int follower = leader_ == 3 ? 2 : 3;
  const int other = 6 - leader_ - follower;
  std::mt19937_64 rng(27);
  ASSERT_TRUE(StoreResult(leader_, "before", "small"));
  ASSERT_TRUE(cluster_.Stop(follower).ok());
  const auto start_writes = Clock::now();
  for (int i = 0; i < kLargeKeys; ++i) {
    ASSERT_TRUE(StoreResult(leader_, absl::StrCat("large", i),
                            RandomBytes(rng, kResultBytes)))
        << i;
  }
  const uint64_t state_bytes = DirBytes(cluster_.data_dir(leader_) + "/state");
  std::cerr
      << "wrote " << kLargeKeys << " x " << kResultBytes << " bytes in "
      << std::chrono::duration<double>(Clock::now() - start_writes).count()
      << " s; leader state " << (state_bytes >> 20) << " MiB\n";
  ASSERT_GE(state_bytes, kMinSnapshotBytes);

  // The follower comes back behind the log: it must fetch the state. The
  // fetch writes into <data>/state.incoming; stop the leader as soon as it
  // appears.
  const std::string incoming = cluster_.data_dir(follower) + "/state.incoming";
  ASSERT_TRUE(cluster_.Start(follower).ok());
  const auto restarted = Clock::now();
  while (!std::filesystem::exists(incoming) &&
         Clock::now() - restarted < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(std::filesystem::exists(incoming)) << "no fetch began";
  const pid_t stopped = cluster_.process(leader_)->pid();
  ASSERT_EQ(::kill(stopped, SIGSTOP), 0);
  const auto cut = Clock::now();
  absl::Cleanup resume = [stopped] { ::kill(stopped, SIGCONT); };
  std::cerr << "leader " << leader_ << " stopped "
            << std::chrono::duration<double>(cut - restarted).count()
            << " s after the follower started, with "
            << (DirBytes(incoming) >> 20) << " MiB fetched\n";

  // The two running nodes agree on a new leader within 2 s.
  int64_t elected = 0;
  while (Clock::now() - cut < std::chrono::seconds(30)) {
    const int64_t a = LeaderSeenBy(other);
    const int64_t b = LeaderSeenBy(follower);
    if (a > 0 && a != leader_ && a == b) {
      elected = a;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double to_elect =
      std::chrono::duration<double>(Clock::now() - cut).count();
  std::cerr << "leader after the cut: " << elected << " in " << to_elect
            << " s\n";
  ASSERT_GT(elected, 0) << "no leader 30 s after the cut";
  EXPECT_LT(to_elect, 2.0);

  // Writes commit once the follower has the state (fetched from the node
  // that still runs).
  bool wrote = false;
  while (!wrote && Clock::now() - cut < std::chrono::seconds(60)) {
    wrote = StoreResult(static_cast<int>(elected), "after-cut", "written");
  }
  std::cerr << "first write after the cut acknowledged after "
            << std::chrono::duration<double>(Clock::now() - cut).count()
            << " s\n";
  ASSERT_TRUE(wrote);
  EXPECT_TRUE(InstalledASnapshot(follower))
      << cluster_.process(follower)->captured_stderr();
  // It gave the stopped leader up for want of progress, not by a deadline.
  EXPECT_NE(cluster_.process(follower)->captured_stderr().find("no data for"),
            std::string::npos)
      << cluster_.process(follower)->captured_stderr();

  std::move(resume).Invoke();
  ASSERT_TRUE(
      StoreResult(static_cast<int>(elected), "after-resume", "written"));
  ExpectIdenticalReplicas();
  absl::StatusOr<v1::DigestResponse> digest = cluster_.Digest(follower);
  ASSERT_TRUE(digest.ok()) << digest.status();
  EXPECT_GE(digest->live_records(), static_cast<uint64_t>(kLargeKeys + 3));
}

}  // namespace
}  // namespace dedup
