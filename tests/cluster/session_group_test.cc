// Dedup.Session on nodes hosting several groups (3 nodes, 3 groups): an
// operation whose group the node does not lead is answered UNAVAILABLE
// with ItemError.leader naming the node that does (streams are never
// forwarded), and there the same operation is decided.
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"

namespace dedup {
namespace {

v1::SessionOp BeginOp(uint64_t id, const std::string& key) {
  v1::SessionOp op;
  op.set_id(id);
  op.mutable_begin()->set_namespace_("session");
  op.mutable_begin()->set_key(key);
  op.mutable_begin()->set_owner("o");
  op.mutable_begin()->set_args_hash("h");
  return op;
}

// One stream to `address` carrying a Begin of each of `keys` (ids are the
// indexes); the answers by id.
std::map<uint64_t, v1::SessionAnswer> BeginAll(
    const std::string& address, const std::vector<std::string>& keys) {
  auto stub = v1::Dedup::NewStub(testing::TestChannel(address));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(20));
  auto stream = stub->Session(&context);
  std::map<uint64_t, v1::SessionAnswer> answers;
  v1::SessionResponse frame;
  if (!stream->Read(&frame) || frame.max_in_flight() == 0) {
    ADD_FAILURE() << address
                  << ": no first frame: " << stream->Finish().error_message();
    return answers;
  }
  v1::SessionRequest request;
  for (size_t i = 0; i < keys.size(); ++i) {
    *request.add_ops() = BeginOp(i, keys[i]);
  }
  EXPECT_TRUE(stream->Write(request));
  while (answers.size() < keys.size() && stream->Read(&frame)) {
    for (const v1::SessionAnswer& a : frame.answers()) answers[a.id()] = a;
  }
  stream->WritesDone();
  while (stream->Read(&frame)) {
  }
  const grpc::Status end = stream->Finish();
  EXPECT_TRUE(end.ok()) << address << ": " << end.error_message();
  return answers;
}

// The answer to a Begin of `key` sent through `address`, following
// ItemError.leader up to 3 times (a leadership moving meanwhile). Sets
// *first_hint to the first leader named.
v1::SessionAnswer BeginFollowing(std::string address, const std::string& key,
                                 std::string* first_hint) {
  v1::SessionAnswer answer;
  for (int hop = 0; hop < 4; ++hop) {
    answer = BeginAll(address, {key})[0];
    if (!answer.has_error() || answer.error().leader().empty()) break;
    if (first_hint->empty()) *first_hint = answer.error().leader();
    address = answer.error().leader();
  }
  return answer;
}

TEST(SessionGroupTest, AFollowerNamesTheLeaderOfTheOperationsGroup) {
  ClusterHarness cluster(3, {"--groups=3", "--forward_to_leader=false"});
  ASSERT_TRUE(cluster.StartAll().ok());
  std::set<std::string> addresses;
  for (int id = 1; id <= 3; ++id) addresses.insert(cluster.client_address(id));
  int redirected = 0;
  int decided_here = 0;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int via = 1; via <= 3; ++via) {
    const std::string self = cluster.client_address(via);
    for (int i = 0; i < 8; ++i) {
      const std::string key = absl::StrCat("via", via, "-key", i);
      std::string hint;
      v1::SessionAnswer answer = BeginFollowing(self, key, &hint);
      // Electing at first: no leader known yet anywhere.
      while (answer.has_error() && answer.error().leader().empty() &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        answer = BeginFollowing(self, key, &hint);
      }
      ASSERT_TRUE(answer.has_begin()) << key << ": " << answer.DebugString();
      EXPECT_EQ(answer.begin().status(), v1::BeginResponse::STARTED) << key;
      if (hint.empty()) {
        ++decided_here;
        continue;
      }
      ++redirected;
      EXPECT_NE(hint, self) << key;
      EXPECT_EQ(addresses.count(hint), 1u) << key << ": " << hint;
    }
  }
  // Each group has one leader among 3 nodes: most operations go elsewhere.
  EXPECT_GT(redirected, 0);
  EXPECT_GT(decided_here, 0);

  // A batch item refused the same way names the leader too (forwarding is
  // off on these nodes). A batch that met an election (leaderships still
  // move to their preferred nodes) is sent again, with fresh keys.
  int batch_hints = 0;
  for (int via = 1; via <= 3; ++via) {
    v1::BeginBatchResponse answered;
    for (int attempt = 0;; ++attempt) {
      v1::BeginBatchRequest batch;
      for (int i = 0; i < 8; ++i) {
        *batch.add_items() =
            BeginOp(0, absl::StrCat("batch", via, "-", attempt, "-", i))
                .begin();
      }
      auto stub =
          v1::Dedup::NewStub(testing::TestChannel(cluster.client_address(via)));
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(10));
      answered.Clear();
      ASSERT_TRUE(stub->BeginBatch(&context, batch, &answered).ok());
      bool electing = false;
      for (const auto& item : answered.items()) {
        electing =
            electing || (item.has_error() && item.error().leader().empty());
      }
      if (!electing || std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    for (const auto& item : answered.items()) {
      if (!item.has_error()) continue;
      EXPECT_EQ(item.error().code(), grpc::StatusCode::UNAVAILABLE);
      EXPECT_NE(item.error().leader(), cluster.client_address(via));
      EXPECT_EQ(addresses.count(item.error().leader()), 1u)
          << item.error().DebugString();
      ++batch_hints;
    }
  }
  EXPECT_GT(batch_hints, 0);
}

// A leader cut off from its followers: an operation with a timeout_ms is
// answered DEADLINE_EXCEEDED when it passes, one without is answered ABORTED
// OUTCOME_UNKNOWN once the leader steps down (it was proposed, maybe
// applied), or UNAVAILABLE when the step-down came first.
TEST(SessionGroupTest, ALeaderWithoutQuorumAnswersTimeoutAndOutcomeUnknown) {
  ClusterHarness cluster(3);
  ASSERT_TRUE(cluster.StartAll().ok());
  absl::StatusOr<int> leader = cluster.WaitForLeader();
  ASSERT_TRUE(leader.ok()) << leader.status();
  // Decided there first, so the stream's first frame is not an election's.
  ASSERT_TRUE(
      BeginAll(cluster.client_address(*leader), {"warm"})[0].has_begin());
  for (int id = 1; id <= 3; ++id) {
    if (id != *leader) cluster.Kill(id);
  }
  auto stub =
      v1::Dedup::NewStub(testing::TestChannel(cluster.client_address(*leader)));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  auto stream = stub->Session(&context);
  v1::SessionResponse frame;
  ASSERT_TRUE(stream->Read(&frame));
  v1::SessionRequest request;
  *request.add_ops() = BeginOp(1, "timed");
  request.mutable_ops(0)->set_timeout_ms(300);
  *request.add_ops() = BeginOp(2, "untimed");
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(stream->Write(request));
  std::map<uint64_t, v1::SessionAnswer> answers;
  std::map<uint64_t, std::chrono::steady_clock::duration> took;
  while (answers.size() < 2 && stream->Read(&frame)) {
    for (const v1::SessionAnswer& a : frame.answers()) {
      answers[a.id()] = a;
      took[a.id()] = std::chrono::steady_clock::now() - start;
    }
  }
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[1].error().code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << answers[1].DebugString();
  EXPECT_LT(took[1], std::chrono::milliseconds(1500));
  const v1::ItemError& untimed = answers[2].error();
  if (untimed.code() == grpc::StatusCode::ABORTED) {
    EXPECT_EQ(untimed.reason(), "OUTCOME_UNKNOWN") << untimed.DebugString();
  } else {
    EXPECT_EQ(untimed.code(), grpc::StatusCode::UNAVAILABLE)
        << answers[2].DebugString();
  }
  stream->WritesDone();
  while (stream->Read(&frame)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
}

}  // namespace
}  // namespace dedup
