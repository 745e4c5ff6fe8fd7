// No failed calls during leadership transfers: plain clients, each talking
// to one node with a deadline of a few seconds and no retries, write
// Begins, Completes and batches while leadership moves back and forth
// (Cluster.TransferLeadership), and every call succeeds. The old leader
// holds the proposals that arrive while a transfer is in flight
// (replication/replicated_store.h) and a forwarder re-sends a call refused
// before its proposal to the new leader once (server/forwarder.h).
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"

namespace dedup {
namespace transfer_test {
namespace {

constexpr int kTransfers = 20;
constexpr int kCallDeadlineMs = 3000;

void Deadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(kCallDeadlineMs));
}

// Failed calls by "method: code: message".
class Failures {
 public:
  void Add(const std::string& method, int code, const std::string& message) {
    std::lock_guard<std::mutex> lock(mu_);
    ++by_kind_[absl::StrCat(method, ": code ", code, ": ", message)];
    ++total_;
  }
  int total() {
    std::lock_guard<std::mutex> lock(mu_);
    return total_;
  }
  std::string Describe() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const auto& [kind, n] : by_kind_) {
      absl::StrAppend(&out, "  ", n, "x ", kind, "\n");
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> by_kind_;
  int total_ = 0;
};

class TransferTest : public ::testing::TestWithParam<int> {
 protected:
  TransferTest()
      : cluster_(3, {absl::StrCat("--groups=", GetParam())}),
        groups_(GetParam()) {}

  void SetUp() override {
    ASSERT_TRUE(cluster_.StartAll().ok());
    for (uint32_t g = 0; g < static_cast<uint32_t>(groups_); ++g) {
      ASSERT_NE(WaitForLeaderOf(g, 0, std::chrono::seconds(30)), 0)
          << "group " << g;
    }
  }

  // Group `g`'s leader as node `id` reports it (0: unknown).
  int LeaderOf(uint32_t g, int id) {
    auto stub =
        v1::Cluster::NewStub(testing::TestChannel(cluster_.client_address(id)));
    grpc::ClientContext context;
    Deadline(&context);
    v1::ClusterStatusRequest request;
    request.set_group_id(g);
    v1::ClusterStatusResponse status;
    if (!stub->Status(&context, request, &status).ok()) return 0;
    return static_cast<int>(status.leader_id());
  }

  // Until every node names the same leader of `g` (`want`, or any when 0);
  // returns it, 0 at the timeout.
  int WaitForLeaderOf(uint32_t g, int want, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      const int leader = LeaderOf(g, 1);
      bool agreed = leader != 0 && (want == 0 || leader == want);
      for (int id = 2; id <= 3 && agreed; ++id) {
        agreed = LeaderOf(g, id) == leader;
      }
      if (agreed) return leader;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return 0;
  }

  // Asks group `g`'s leader to hand leadership to another node; true once
  // every node names that node.
  bool TransferOnce(uint32_t g) {
    const int from = WaitForLeaderOf(g, 0, std::chrono::seconds(10));
    if (from == 0) return false;
    const int to = from % 3 + 1;
    auto stub = v1::Cluster::NewStub(
        testing::TestChannel(cluster_.client_address(from)));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::TransferLeadershipRequest request;
    request.set_node_id(to);
    request.set_group_id(g);
    v1::TransferLeadershipResponse response;
    grpc::Status s = stub->TransferLeadership(&context, request, &response);
    if (!s.ok()) {
      ADD_FAILURE() << "transfer of group " << g << " from " << from << " to "
                    << to << ": " << s.error_message();
      return false;
    }
    return WaitForLeaderOf(g, to, std::chrono::seconds(10)) == to;
  }

  // One writer: through node `via` only, one call at a time, no retries.
  void Write(int via, int writer) {
    auto stub = cluster_.DedupStub(via);
    for (int i = 0; !stop_.load(); ++i) {
      const std::string key = absl::StrCat("w", writer, "-", i);
      if (i % 5 == 4) {
        WriteBatch(stub.get(), key);
        continue;
      }
      grpc::ClientContext begin_context;
      Deadline(&begin_context);
      v1::BeginResponse begun;
      grpc::Status s = stub->Begin(&begin_context, BeginOf(key, "w"), &begun);
      ++calls_;
      if (!s.ok()) {
        failures_.Add(absl::StrCat("Begin via ", via), s.error_code(),
                      s.error_message());
        continue;
      }
      if (begun.status() != v1::BeginResponse::STARTED) {
        failures_.Add("Begin", 0,
                      v1::BeginResponse::Status_Name(begun.status()));
        continue;
      }
      grpc::ClientContext complete_context;
      Deadline(&complete_context);
      v1::CompleteResponse completed;
      s = stub->Complete(&complete_context,
                         CompleteOf(key, begun.fence(), "result"), &completed);
      ++calls_;
      if (!s.ok()) {
        failures_.Add(absl::StrCat("Complete via ", via), s.error_code(),
                      s.error_message());
      } else if (completed.status() != v1::CompleteResponse::OK) {
        failures_.Add("Complete", 0,
                      v1::CompleteResponse::Status_Name(completed.status()));
      }
    }
  }

  // A BeginBatch of 8 keys, then the CompleteBatch of those started.
  void WriteBatch(v1::Dedup::Stub* stub, const std::string& prefix) {
    v1::BeginBatchRequest begins;
    for (int k = 0; k < 8; ++k) {
      *begins.add_items() = BeginOf(absl::StrCat(prefix, "-", k), "w");
    }
    grpc::ClientContext begin_context;
    Deadline(&begin_context);
    v1::BeginBatchResponse begun;
    grpc::Status s = stub->BeginBatch(&begin_context, begins, &begun);
    ++calls_;
    if (!s.ok()) {
      failures_.Add("BeginBatch", s.error_code(), s.error_message());
      return;
    }
    v1::CompleteBatchRequest completes;
    for (int k = 0; k < begun.items_size(); ++k) {
      const auto& item = begun.items(k);
      if (item.has_error()) {
        failures_.Add("BeginBatch item", item.error().code(),
                      item.error().message());
      } else if (item.response().status() != v1::BeginResponse::STARTED) {
        failures_.Add("BeginBatch item", 0,
                      v1::BeginResponse::Status_Name(item.response().status()));
      } else {
        *completes.add_items() = CompleteOf(begins.items(k).key(),
                                            item.response().fence(), "result");
      }
    }
    if (completes.items_size() == 0) return;
    grpc::ClientContext complete_context;
    Deadline(&complete_context);
    v1::CompleteBatchResponse completed;
    s = stub->CompleteBatch(&complete_context, completes, &completed);
    ++calls_;
    if (!s.ok()) {
      failures_.Add("CompleteBatch", s.error_code(), s.error_message());
      return;
    }
    for (const auto& item : completed.items()) {
      if (item.has_error()) {
        failures_.Add("CompleteBatch item", item.error().code(),
                      item.error().message());
      } else if (item.response().status() != v1::CompleteResponse::OK) {
        failures_.Add(
            "CompleteBatch item", 0,
            v1::CompleteResponse::Status_Name(item.response().status()));
      }
    }
  }

  ClusterHarness cluster_;
  const int groups_;
  std::atomic<bool> stop_{false};
  std::atomic<int> calls_{0};
  Failures failures_;
};

TEST_P(TransferTest, NoCallFailsWhileLeadershipMovesBackAndForth) {
  // Two writers per node: through the leader, through a follower that
  // forwards to it, and through the node about to lead.
  std::vector<std::thread> writers;
  for (int w = 0; w < 6; ++w) {
    writers.emplace_back([this, w] { Write(w % 3 + 1, w); });
  }
  int transferred = 0;
  for (int t = 0; t < kTransfers; ++t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (TransferOnce(static_cast<uint32_t>(t % groups_))) ++transferred;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop_.store(true);
  for (std::thread& w : writers) w.join();
  EXPECT_EQ(transferred, kTransfers);
  EXPECT_GT(calls_.load(), 200);
  EXPECT_EQ(failures_.total(), 0)
      << failures_.total() << " of " << calls_.load() << " calls failed over "
      << transferred << " transfers:\n"
      << failures_.Describe();
  std::cout << calls_.load() << " calls, " << failures_.total()
            << " failed, over " << transferred << " transfers\n"
            << failures_.Describe();
}

// One group; three groups (each transfer moves the next group).
INSTANTIATE_TEST_SUITE_P(Groups, TransferTest, ::testing::Values(1, 3),
                         [](const auto& info) {
                           return absl::StrCat("Groups", info.param);
                         });

}  // namespace
}  // namespace transfer_test
}  // namespace dedup
