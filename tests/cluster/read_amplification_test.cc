// Reads in a replicated group do not amplify: one BeginBatch naming a key
// with a large result 1,000 times costs no replica more than a bounded
// amount of memory, and the group keeps its leader and its writes meanwhile.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"

namespace dedup {
namespace {

constexpr int64_t kMiB = 1 << 20;

// A field of /proc/<pid>/status in bytes (it is given in kB); -1 when
// unreadable.
int64_t ProcStatusBytes(pid_t pid, absl::string_view field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, field) || !absl::ConsumePrefix(&rest, ":"))
      continue;
    rest = absl::StripAsciiWhitespace(rest);
    absl::ConsumeSuffix(&rest, " kB");
    int64_t kb = 0;
    return absl::SimpleAtoi(rest, &kb) ? kb * 1024 : -1;
  }
  return -1;
}

// Resets the process's peak RSS (VmHWM) to its current RSS; false when the
// kernel does not allow it.
bool ResetPeakRss(pid_t pid) {
  const int fd =
      open(absl::StrCat("/proc/", pid, "/clear_refs").c_str(), O_WRONLY);
  if (fd < 0) return false;
  const bool ok = write(fd, "5", 1) == 1;
  close(fd);
  return ok;
}

class ReadAmplificationTest : public ClusterTest {
 protected:
  // Begins and Completes `key` with `result`, through the leader.
  void Store(const std::string& key, const std::string& result) {
    ASSERT_TRUE(StoreResult(leader_, key, result)) << key;
  }

  // Waits until every node has applied what the leader has now (writes may
  // go on meanwhile, so the nodes need not stop at one index).
  void WaitForFollowers() {
    absl::StatusOr<v1::ClusterStatusResponse> leader = cluster_.Status(leader_);
    ASSERT_TRUE(leader.ok()) << leader.status();
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (int id = 1; id <= 3; ++id) {
      for (;;) {
        absl::StatusOr<v1::ClusterStatusResponse> status = cluster_.Status(id);
        if (status.ok() && status->applied_index() >= leader->applied_index())
          break;
        ASSERT_LT(std::chrono::steady_clock::now(), deadline)
            << "node " << id << " did not apply index "
            << leader->applied_index();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
};

// Samples the nodes' RSS until destroyed: the highest seen per node.
class RssSampler {
 public:
  explicit RssSampler(std::vector<pid_t> pids)
      : pids_(std::move(pids)), peak_(pids_.size()) {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        for (size_t n = 0; n < pids_.size(); ++n) {
          const int64_t rss = ProcStatusBytes(pids_[n], "VmRSS");
          if (rss > peak_[n].load()) peak_[n].store(rss);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  ~RssSampler() { Stop(); }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  int64_t peak(size_t n) const { return peak_[n].load(); }

 private:
  const std::vector<pid_t> pids_;
  std::vector<std::atomic<int64_t>> peak_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Another client's writes, one Begin + Complete at a time, until stopped:
// counts failures and the longest wait between two acknowledged writes.
class Writer {
 public:
  explicit Writer(std::string address) : address_(std::move(address)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Writer() { Stop(); }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  int64_t acknowledged() const { return acknowledged_.load(); }
  int64_t failed() const { return failed_.load(); }
  std::string first_error() const { return first_error_; }  // after Stop
  double longest_gap_s() const { return longest_gap_s_; }   // after Stop

 private:
  bool Write(int i) {
    auto stub = v1::Dedup::NewStub(testing::TestChannel(address_));
    const std::string key = absl::StrCat("writer-", i);
    grpc::ClientContext begin_context;
    begin_context.set_deadline(std::chrono::system_clock::now() +
                               std::chrono::seconds(5));
    v1::BeginResponse begun;
    grpc::Status s = stub->Begin(&begin_context, BeginOf(key, "w"), &begun);
    if (!s.ok()) return Failed(s);
    v1::CompleteRequest complete;
    complete.set_namespace_("cluster");
    complete.set_key(key);
    complete.set_fence(begun.fence());
    complete.set_outcome(v1::SUCCESS);
    complete.set_result("done");
    grpc::ClientContext complete_context;
    complete_context.set_deadline(std::chrono::system_clock::now() +
                                  std::chrono::seconds(5));
    v1::CompleteResponse completed;
    s = stub->Complete(&complete_context, complete, &completed);
    if (!s.ok()) return Failed(s);
    return completed.status() == v1::CompleteResponse::OK;
  }

  bool Failed(const grpc::Status& s) {
    if (first_error_.empty()) {
      first_error_ = absl::StrCat(s.error_code(), ": ", s.error_message());
    }
    return false;
  }

  void Run() {
    auto last = std::chrono::steady_clock::now();
    for (int i = 0; !stop_.load(); ++i) {
      if (Write(i)) {
        const auto now = std::chrono::steady_clock::now();
        longest_gap_s_ = std::max(
            longest_gap_s_, std::chrono::duration<double>(now - last).count());
        last = now;
        acknowledged_.fetch_add(1);
      } else {
        failed_.fetch_add(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // A group that stopped acknowledging before the end counts too.
    longest_gap_s_ = std::max(
        longest_gap_s_,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last)
            .count());
  }

  const std::string address_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> acknowledged_{0};
  std::atomic<int64_t> failed_{0};
  std::string first_error_;
  double longest_gap_s_ = 0;
  std::thread thread_;
};

TEST_F(ReadAmplificationTest, ABatchOfReadsOfOneLargeResultStaysBounded) {
  const std::string result(kMiB, 'r');
  ASSERT_NO_FATAL_FAILURE(Store("large", result));
  ASSERT_TRUE(cluster_.ConvergedDigests().ok());

  std::vector<int64_t> before(4, 0);
  std::vector<v1::ClusterStatusResponse> status_before(4);
  for (int id = 1; id <= 3; ++id) {
    const pid_t pid = cluster_.process(id)->pid();
    ASSERT_GT(pid, 0);
    before[id] = ProcStatusBytes(pid, "VmRSS");
    ASSERT_GT(before[id], 0);
    ResetPeakRss(pid);
    absl::StatusOr<v1::ClusterStatusResponse> status = cluster_.Status(id);
    ASSERT_TRUE(status.ok()) << status.status();
    status_before[id] = *status;
  }
  // Peak RSS per node while the batch runs, sampled (VmHWM may not reset).
  RssSampler sampler({cluster_.process(1)->pid(), cluster_.process(2)->pid(),
                      cluster_.process(3)->pid()});
  Writer writer(cluster_.client_address(leader_));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int64_t acknowledged_before = writer.acknowledged();

  v1::BeginBatchRequest batch;
  for (int i = 0; i < 1000; ++i) *batch.add_items() = BeginOf("large", "x");
  v1::BeginBatchResponse answered;
  grpc::Status s = Call(cluster_.client_address(leader_),
                        &v1::Dedup::Stub::BeginBatch, batch, &answered);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // Let the followers apply the entry and the writer go on after it.
  ASSERT_NO_FATAL_FAILURE(WaitForFollowers());
  const int64_t acknowledged_after_batch = writer.acknowledged();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  writer.Stop();
  sampler.Stop();

  // The answers are today's: the budget's worth of DUPLICATEs with the
  // result, then "ask again" for the rest, in item order.
  ASSERT_EQ(answered.items_size(), 1000);
  int duplicates = 0;
  for (int i = 0; i < answered.items_size(); ++i) {
    const auto& item = answered.items(i);
    if (i < 3) {
      ASSERT_TRUE(item.has_response()) << i << ": " << item.error().message();
      EXPECT_EQ(item.response().status(), v1::BeginResponse::DUPLICATE);
      EXPECT_EQ(item.response().result(), result);
      ++duplicates;
    } else {
      ASSERT_TRUE(item.has_error()) << i;
      EXPECT_EQ(item.error().reason(), "RESULT_BUDGET") << i;
      EXPECT_EQ(item.error().code(), grpc::StatusCode::UNAVAILABLE) << i;
    }
  }
  EXPECT_EQ(duplicates, 3);

  for (int id = 1; id <= 3; ++id) {
    const pid_t pid = cluster_.process(id)->pid();
    const int64_t highest =
        std::max(sampler.peak(id - 1), ProcStatusBytes(pid, "VmHWM"));
    std::cerr << "node " << id << (id == leader_ ? " (leader)" : "")
              << ": VmRSS before " << before[id] / kMiB << " MiB, peak "
              << highest / kMiB << " MiB, after "
              << ProcStatusBytes(pid, "VmRSS") / kMiB << " MiB\n";
    EXPECT_LE(highest - before[id], 64 * kMiB) << "node " << id;
    absl::StatusOr<v1::ClusterStatusResponse> status = cluster_.Status(id);
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_EQ(status->term(), status_before[id].term()) << "node " << id;
    EXPECT_EQ(status->leader_changes(), status_before[id].leader_changes())
        << "node " << id;
  }
  std::cerr << "writer: " << writer.acknowledged() << " acknowledged, "
            << writer.failed() << " failed, longest gap "
            << writer.longest_gap_s() << " s\n";
  EXPECT_EQ(writer.failed(), 0) << writer.first_error();
  EXPECT_GT(acknowledged_before, 0);
  EXPECT_GT(writer.acknowledged(), acknowledged_after_batch);
  EXPECT_LT(writer.longest_gap_s(), 2.0);
  ExpectIdenticalReplicas();
}

}  // namespace
}  // namespace dedup
