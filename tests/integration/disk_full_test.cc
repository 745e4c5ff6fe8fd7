// A full disk stops writes, not the server: callers get UNAVAILABLE with a
// clear message at once, nothing acknowledged is lost, and writes come back
// by themselves, without a restart, once there is room again.
//
// The data dir is on a small tmpfs mounted by the test (root only; skipped
// otherwise), beside a filler file: writers fill the rest with large results
// until writes are refused, then the filler is deleted. The server refuses
// writes while less than its memory budget (16 MiB here) is free, before
// RocksDB itself runs out (storage/write_health.h; RocksDB's own failures
// and Resume() are covered by tests/unit/store_write_stop_test.cc).

#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/http_get.h"
#include "tests/testing/server_process.h"

namespace dedup::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using v1::BeginResponse;
using v1::CompleteResponse;
namespace health = ::grpc::health::v1;

constexpr char kTmpfsSize[] = "size=48m";
constexpr size_t kFillerBytes = 16 << 20;
constexpr size_t kResultBytes = 256 << 10;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}

struct FillCase {
  const char* name;
  std::vector<std::string> flags;
};

class DiskFullTest : public ::testing::TestWithParam<FillCase> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root: the test mounts a small tmpfs to fill";
    }
    absl::StatusOr<std::string> dir = MakeTempDir("dedup-diskfull");
    ASSERT_TRUE(dir.ok()) << dir.status();
    mount_point_ = *dir;
    if (mount("tmpfs", mount_point_.c_str(), "tmpfs", 0, kTmpfsSize) != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs on " << mount_point_ << ": "
                   << std::strerror(errno);
    }
    mounted_ = true;
    filler_ = mount_point_ + "/filler";
    top_up_ = mount_point_ + "/top-up";
    std::ofstream(filler_, std::ios::binary) << std::string(kFillerBytes, 'f');
    ASSERT_EQ(fs::file_size(filler_), kFillerBytes);
    data_dir_ = mount_point_ + "/data";
  }

  void TearDown() override {
    server_.reset();  // SIGKILL if still running: the mount must be free
    if (mounted_) umount2(mount_point_.c_str(), MNT_DETACH);
    if (!mount_point_.empty()) rmdir(mount_point_.c_str());
  }

  void StartServer() {
    std::vector<std::string> flags = GetParam().flags;
    flags.push_back("--event_log=off");
    flags.push_back("--metrics_address=127.0.0.1:0");
    absl::StatusOr<std::unique_ptr<ServerProcess>> started =
        ServerProcess::Start(flags, data_dir_);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
  }

  // Writers Begin and Complete large results until the disk is full; each
  // stops at its first failed call, whose status is kept. Every Complete
  // answered OK is in acked_.
  void FillUntilWritesFail() {
    constexpr int kWriters = 4;
    std::vector<std::thread> writers;
    const Clock::time_point start = Clock::now();
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([this, w, start] {
        TestClient c(server_->address());
        const std::string result(kResultBytes, static_cast<char>('a' + w));
        for (int i = 0; MsSince(start) < 60'000; ++i) {
          const std::string key = absl::StrCat("fill-", w, "-", i);
          BeginResponse began;
          grpc::Status s = c.BeginStatus(c.BeginReq(key, "filler"), &began);
          if (s.ok() && began.status() != BeginResponse::STARTED) {
            s = grpc::Status(grpc::StatusCode::INTERNAL,
                             "Begin answered " + began.DebugString());
          }
          if (s.ok()) {
            v1::CompleteRequest req;
            req.set_namespace_(c.ns());
            req.set_key(key);
            req.set_fence(began.fence());
            req.set_outcome(v1::SUCCESS);
            req.set_result(result);
            CompleteResponse done;
            s = c.CompleteStatus(req, &done);
            if (s.ok() && done.status() != CompleteResponse::OK) {
              s = grpc::Status(grpc::StatusCode::INTERNAL,
                               "Complete answered " + done.DebugString());
            }
          }
          std::lock_guard<std::mutex> lock(mu_);
          if (!s.ok()) {
            first_errors_.push_back(s);
            return;
          }
          acked_.push_back(key);
        }
      });
    }
    for (std::thread& t : writers) t.join();
    std::cerr << acked_.size() << " Completes of " << kResultBytes / 1024
              << " KiB acknowledged before the disk was full ("
              << MsSince(start) << " ms)\n";
  }

  // Tops the disk up with a second filler until `left` bytes are free: a
  // compaction that reclaims a few MiB must not lift it over the floor
  // while the test expects refusals.
  void FillLeaving(uint64_t left) {
    struct statvfs fs;
    ASSERT_EQ(statvfs(mount_point_.c_str(), &fs), 0);
    const uint64_t free_bytes =
        static_cast<uint64_t>(fs.f_bavail) * static_cast<uint64_t>(fs.f_frsize);
    if (free_bytes <= left) return;
    std::ofstream(top_up_, std::ios::binary)
        << std::string(free_bytes - left, 't');
  }

  static void ExpectDiskFullError(const grpc::Status& s) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE)
        << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "storage cannot write"))
        << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "16.0 MiB kept free"))
        << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "resume by themselves"))
        << s.error_message();
  }

  // The standard health status of the whole server (service "").
  health::HealthCheckResponse::ServingStatus Health() const {
    auto stub = health::Health::NewStub(grpc::CreateChannel(
        server_->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    health::HealthCheckResponse resp;
    const grpc::Status s =
        stub->Check(&ctx, health::HealthCheckRequest(), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.status();
  }

  // Polls Health() until it is `want` (it follows storage every 250 ms).
  void ExpectHealthBecomes(health::HealthCheckResponse::ServingStatus want) {
    const Clock::time_point start = Clock::now();
    health::HealthCheckResponse::ServingStatus got = Health();
    while (got != want && MsSince(start) < 5000) {
      SleepMs(50);
      got = Health();
    }
    EXPECT_EQ(got, want);
  }

  double Metric(const std::string& series) const {
    return ScrapeSample(server_->metrics_port(), series).value_or(-1);
  }

  // Every acknowledged Complete reads back, with its result.
  void ExpectEveryAckedRecord(TestClient& c) {
    int missing = 0;
    for (const std::string& key : acked_) {
      const v1::GetResponse got = c.Get(key);
      if (!got.found() || got.record().result().size() != kResultBytes) {
        if (++missing <= 5) ADD_FAILURE() << key << " lost";
      }
    }
    EXPECT_EQ(missing, 0) << "of " << acked_.size() << " acknowledged";
  }

  std::string mount_point_;
  bool mounted_ = false;
  std::string filler_;
  std::string top_up_;
  std::string data_dir_;
  std::unique_ptr<ServerProcess> server_;
  std::mutex mu_;
  std::vector<std::string> acked_;
  std::vector<grpc::Status> first_errors_;
};

TEST_P(DiskFullTest, WritesFailFastAndResumeByThemselvesWithNothingLost) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  FillUntilWritesFail();
  ASSERT_GT(acked_.size(), 0u) << "the disk was full from the start";
  ASSERT_FALSE(first_errors_.empty());
  for (const grpc::Status& s : first_errors_) ExpectDiskFullError(s);

  // While full: refused at once, the same way, and the server stays up.
  ASSERT_NO_FATAL_FAILURE(FillLeaving(4 << 20));
  TestClient c(server_->address());
  double slowest_ms = 0;
  for (int i = 0; i < 20; ++i) {
    const Clock::time_point start = Clock::now();
    BeginResponse began;
    const grpc::Status s =
        c.BeginStatus(c.BeginReq(absl::StrCat("while-full-", i), "w"), &began);
    slowest_ms = std::max(slowest_ms, MsSince(start));
    ExpectDiskFullError(s);
  }
  std::cerr << "slowest of 20 refused Begins while full: " << slowest_ms
            << " ms\n";
  // (Generous for a loaded CI machine: a stalled write would take seconds.)
  EXPECT_LT(slowest_ms, 1000) << "refusals should not wait for anything";
  // Health checks and metrics say so.
  ExpectHealthBecomes(health::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Metric("dedup_storage_write_stopped"), 1);
  EXPECT_GT(Metric("dedup_data_dir_free_bytes"), 0);
  EXPECT_LT(Metric("dedup_data_dir_free_bytes"), 16 << 20);

  // Room again: writes come back without a restart.
  ASSERT_TRUE(fs::remove(filler_));
  ASSERT_TRUE(fs::remove(top_up_));
  const Clock::time_point freed = Clock::now();
  bool resumed = false;
  grpc::Status last;
  while (!resumed && MsSince(freed) < 15'000) {
    BeginResponse began;
    last = c.BeginStatus(c.BeginReq("after-space-is-back", "w"), &began);
    if (last.ok()) {
      ASSERT_EQ(began.status(), BeginResponse::STARTED);
      ASSERT_EQ(c.Complete("after-space-is-back", began.fence(),
                           std::string(kResultBytes, 'z'))
                    .status(),
                CompleteResponse::OK);
      resumed = true;
    } else {
      SleepMs(20);
    }
  }
  const double resume_ms = MsSince(freed);
  ASSERT_TRUE(resumed) << "writes did not come back within 15 s: "
                       << last.error_message() << "\nserver output:\n"
                       << server_->captured_stderr();
  std::cerr << "writes resumed " << resume_ms << " ms after space was freed\n";
  EXPECT_LT(resume_ms, 5000);
  ExpectHealthBecomes(health::HealthCheckResponse::SERVING);
  EXPECT_EQ(Metric("dedup_storage_write_stopped"), 0);
  EXPECT_GE(Metric("dedup_storage_write_resumes_total"), 1);
  acked_.push_back("after-space-is-back");
  ExpectEveryAckedRecord(c);

  // And after a clean restart.
  c.Disconnect();
  const absl::Status stopped = server_->Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
  ASSERT_NO_FATAL_FAILURE(StartServer());
  TestClient again(server_->address());
  ExpectEveryAckedRecord(again);
  EXPECT_EQ(again.Begin("after-restart", "w").status(), BeginResponse::STARTED);
  again.Disconnect();
}

// Reads that durable state can answer still work while writes are stopped.
TEST_P(DiskFullTest, DurableRecordsAreStillReadWhileWritesAreStopped) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  FillUntilWritesFail();
  ASSERT_GT(acked_.size(), 0u) << "the disk was full from the start";
  ASSERT_NO_FATAL_FAILURE(FillLeaving(4 << 20));
  TestClient c(server_->address());
  BeginResponse began;
  ExpectDiskFullError(c.BeginStatus(c.BeginReq("still-full", "w"), &began));
  v1::GetRequest req;
  req.set_namespace_(c.ns());
  req.set_key(acked_.front());
  v1::GetResponse got;
  const grpc::Status s = c.GetStatus(req, &got);
  ASSERT_TRUE(s.ok()) << "Get refused while writes are stopped (the server "
                         "must check Store::CheckServingReads for Get): "
                      << s.error_message();
  EXPECT_TRUE(got.found());
  EXPECT_EQ(got.record().result().size(), kResultBytes);
  c.Disconnect();
}

INSTANTIATE_TEST_SUITE_P(
    Fills, DiskFullTest,
    ::testing::Values(
        FillCase{"Sync", {"--memory_budget_mb=16"}},
        FillCase{"Async", {"--memory_budget_mb=16", "--durability=async"}},
        FillCase{"NoWal", {"--memory_budget_mb=16", "--durability=none"}}),
    [](const ::testing::TestParamInfo<FillCase>& info) {
      return std::string(info.param.name);
    });

// A filesystem mounted by a test (root only), unmounted on destruction.
class Mount {
 public:
  // A tmpfs of `size` bytes; empty on failure (the reason in *why).
  static std::unique_ptr<Mount> Tmpfs(size_t size, std::string* why) {
    auto m = std::unique_ptr<Mount>(new Mount);
    if (!m->MakeDir(why)) return nullptr;
    const std::string options = absl::StrCat("size=", size);
    if (mount("tmpfs", m->dir_.c_str(), "tmpfs", 0, options.c_str()) != 0) {
      *why = absl::StrCat("mount tmpfs: ", std::strerror(errno));
      return nullptr;
    }
    m->mounted_ = true;
    return m;
  }
  // An ext4 image of `size` bytes on a loop device (mkfs.ext4 and mount
  // -o loop, as an operator's small disk would be).
  static std::unique_ptr<Mount> Ext4(size_t size, std::string* why) {
    auto m = std::unique_ptr<Mount>(new Mount);
    if (!m->MakeDir(why)) return nullptr;
    m->image_ = m->dir_ + ".img";
    std::ofstream(m->image_).close();
    fs::resize_file(m->image_, size);
    for (const auto& [binary, args] :
         std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"/usr/sbin/mkfs.ext4", {"-q", "-F", m->image_}},
             {"/usr/bin/mount", {"-o", "loop", m->image_, m->dir_}}}) {
      absl::StatusOr<ProcessResult> r = RunProcess(binary, args);
      if (!r.ok() || r->exit_code != 0) {
        *why = absl::StrCat(binary, ": ",
                            r.ok() ? r->output : r.status().ToString());
        return nullptr;
      }
    }
    m->mounted_ = true;
    return m;
  }
  ~Mount() {
    if (mounted_ && umount(dir_.c_str()) != 0) {
      umount2(dir_.c_str(), MNT_DETACH);
    }
    rmdir(dir_.c_str());
    if (!image_.empty()) unlink(image_.c_str());
  }
  const std::string& dir() const { return dir_; }

  // Free bytes for unprivileged writers (df's Avail).
  uint64_t Available() const {
    struct statvfs st;
    if (statvfs(dir_.c_str(), &st) != 0) return 0;
    return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  }
  // Writes a file of zeros until `leave` bytes are available (or none).
  void FillLeaving(uint64_t leave) const {
    std::ofstream out(dir_ + "/filler", std::ios::binary);
    const std::string chunk(1 << 20, 'f');
    while (Available() > leave && out) {
      const uint64_t n = std::min<uint64_t>(chunk.size(), Available() - leave);
      out.write(chunk.data(), n);
      out.flush();
      sync();  // ext4 counts delayed allocations late
    }
  }

 private:
  Mount() = default;
  bool MakeDir(std::string* why) {
    absl::StatusOr<std::string> dir = MakeTempDir("dedup-smallfs");
    if (!dir.ok()) {
      *why = dir.status().ToString();
      return false;
    }
    dir_ = *dir;
    return true;
  }
  std::string dir_;
  std::string image_;
  bool mounted_ = false;
};

// On a nearly full ext4 (about 12 MiB left), dedupd starts with its default
// event log (a key file created in the data dir), measures the space really
// left, and takes writes when --min_free_disk_mb allows them. RocksDB's WAL
// preallocation (1.1 x the memtable size) used to take every free block of
// such a disk at the first write, so the free figure read 0.0 MiB, the key
// file could not be written (exit 2), and every restart did it again.
TEST(NearlyFullDiskTest, Ext4WithTwelveMibLeftStartsAndTakesWrites) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: mounts an ext4 image";
  std::string why;
  std::unique_ptr<Mount> disk = Mount::Ext4(96 << 20, &why);
  if (disk == nullptr) GTEST_SKIP() << "no loop-mounted ext4 here: " << why;
  disk->FillLeaving(12 << 20);
  ASSERT_LE(disk->Available(), 13u << 20);
  const std::string data_dir = disk->dir() + "/data";
  for (int start = 0; start < 2; ++start) {
    SCOPED_TRACE(absl::StrCat("start ", start));
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start(
            {"--min_free_disk_mb=2", "--metrics_address=127.0.0.1:0"},
            data_dir);
    ASSERT_TRUE(server.ok()) << server.status();
    TestClient c((*server)->address());
    const BeginResponse began = c.Begin(absl::StrCat("k", start), "w");
    EXPECT_EQ(began.status(), BeginResponse::STARTED);
    // RocksDB's preallocations (the WAL's, the MANIFEST's) hold at most a
    // few MiB of what is left.
    EXPECT_GE(disk->Available(), 3u << 20);
    c.Disconnect();
    ASSERT_TRUE((*server)->Stop().ok()) << (*server)->captured_stderr();
  }
}

// A key file that cannot be written for want of space says so.
TEST(NearlyFullDiskTest, EventLogKeyOnAFullFilesystemSaysItIsFull) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: mounts a tmpfs";
  std::string why;
  std::unique_ptr<Mount> disk = Mount::Tmpfs(256 << 10, &why);
  if (disk == nullptr) GTEST_SKIP() << why;
  disk->FillLeaving(0);
  ASSERT_EQ(disk->Available(), 0u);
  absl::StatusOr<std::string> data_dir = MakeTempDir("dedup-keyfull");
  ASSERT_TRUE(data_dir.ok());
  absl::StatusOr<ProcessResult> r = RunProcess(
      ServerBinary(),
      {"--address=127.0.0.1:0", "--data_dir=" + *data_dir,
       "--metrics_address=", "--event_log_key_file=" + disk->dir() + "/key"});
  fs::remove_all(*data_dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 2) << r->output;
  EXPECT_TRUE(absl::StrContains(r->output, "No space left on device"))
      << r->output;
  EXPECT_TRUE(absl::StrContains(r->output, "its filesystem is full"))
      << r->output;
}

}  // namespace
}  // namespace dedup::testing
