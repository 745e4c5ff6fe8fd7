// CoalescingClient's Checkpoints: they leave as CheckpointBatch RPCs capped by
// bytes, each caller gets its own item's answer, items are retried the safe
// way, and a server without CheckpointBatch (UNIMPLEMENTED, or the "cannot be
// parsed" answer every dedupd with Checkpoint but not CheckpointBatch gives)
// gets unary Checkpoints instead, for good. Against scripted in-process nodes
// and the real dedupd (batching seen in its metrics, a takeover resuming
// from the last checkpoint, RunOnce's Claim::Checkpoint).
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/batch_answers.h"
#include "client/coalescing_client.h"
#include "client/dedup_client.h"
#include "client/run_once.h"
#include "gmock/gmock.h"
#include "google/protobuf/stubs/common.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/client/failover_helpers.h"
#include "tests/client/scripted_node.h"
#include "tests/testing/http_get.h"
#include "tests/testing/shared_server.h"

namespace dedup {
namespace {

using ::dedup::testing::NotLeader;
using ::dedup::testing::OutcomeUnknown;
using ::dedup::testing::ScriptedNode;
using ::google::protobuf::Message;
using ::testing::ElementsAre;
using ::testing::StartsWith;
using ::testing::UnorderedElementsAre;

// What a dedupd that has Checkpoint but not CheckpointBatch answers a
// CheckpointBatch (its interceptor for unparseable requests rewrites the
// UNIMPLEMENTED of an unknown dedup.v1 method): checked against such a build.
constexpr char kOlderDedupdReply[] =
    "request: cannot be parsed as the request of "
    "/dedup.v1.Dedup/CheckpointBatch (malformed protobuf, or a string field "
    "that is not valid UTF-8)";

std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

CoalescingOptions Options(int in_flight = 1, int max_items = 256) {
  CoalescingOptions options;
  options.rpc = FastRetries();
  options.rpc.deadline = absl::Seconds(10);
  options.max_batches_in_flight = in_flight;
  options.max_batch_items = max_items;
  return options;
}

CheckpointBatchItem Item(const std::string& key, uint64_t fence,
                         const std::string& step = "step",
                         const std::string& data = "data") {
  CheckpointBatchItem item;
  item.ns = "ckpt";
  item.key = key;
  item.fence = fence;
  item.step = step;
  item.data = data;
  return item;
}

// How a scripted node treats CheckpointBatch.
enum class Batches {
  kServed,         // answered per item, as dedupd does
  kUnimplemented,  // UNIMPLEMENTED, as a plain gRPC server without it
  kOlderDedupd,    // kOlderDedupdReply
};

void PrintTo(Batches batches, std::ostream* os) {
  *os << (batches == Batches::kServed          ? "served"
          : batches == Batches::kUnimplemented ? "UNIMPLEMENTED"
                                               : "older_dedupd");
}

// A dedupd-like node: answers every Checkpoint item OK with the item's fence,
// refuses an empty step as dedupd does (batch items with their "items[i]."
// prefix), and serves CheckpointBatch as `batches` says. With `hold_first`,
// its first call waits until Open(), so that calls made meanwhile queue.
class CheckpointNode {
 public:
  explicit CheckpointNode(Batches batches, bool hold_first = false)
      : hold_first_(hold_first) {
    node_.SetScript([this, batches](const std::string& method,
                                    grpc::ServerContext*,
                                    const Message& request, Message* response) {
      HoldFirst();
      if (method == "Checkpoint") {
        const auto& q = static_cast<const v1::CheckpointRequest&>(request);
        if (q.step().empty()) {
          return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "step: must not be empty");
        }
        Answer(q, static_cast<v1::CheckpointResponse*>(response));
        return grpc::Status::OK;
      }
      if (method != "CheckpointBatch") {
        return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, method);
      }
      if (batches == Batches::kUnimplemented) {
        return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "");
      }
      if (batches == Batches::kOlderDedupd) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            kOlderDedupdReply);
      }
      const auto& q = static_cast<const v1::CheckpointBatchRequest&>(request);
      auto* r = static_cast<v1::CheckpointBatchResponse*>(response);
      for (int i = 0; i < q.items_size(); ++i) {
        auto* out = r->add_items();
        if (q.items(i).step().empty()) {
          out->mutable_error()->set_code(
              static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
          out->mutable_error()->set_message(
              absl::StrCat("items[", i, "].step: must not be empty"));
        } else {
          Answer(q.items(i), out->mutable_response());
        }
      }
      return grpc::Status::OK;
    });
  }
  ~CheckpointNode() { Open(); }

  ScriptedNode& node() { return node_; }
  std::string address() const { return node_.address(); }
  void WaitForFirstCall() { first_.WaitForNotification(); }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  // The methods called, in arrival order.
  std::vector<std::string> Methods() const {
    std::vector<std::string> methods;
    for (const ScriptedNode::Call& call : node_.calls()) {
      methods.push_back(call.method);
    }
    return methods;
  }

 private:
  static void Answer(const v1::CheckpointRequest& q,
                     v1::CheckpointResponse* r) {
    r->set_status(v1::CheckpointResponse::OK);
    r->set_fence(q.fence());
  }
  void HoldFirst() {
    if (!hold_first_ || calls_++ != 0) return;
    first_.Notify();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&open_));
  }

  const bool hold_first_;
  std::atomic<int> calls_{0};
  absl::Notification first_;
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  ScriptedNode node_;
};

// Collects async answers by index.
class Answers {
 public:
  explicit Answers(int n) : answers_(n), pending_(n) {}
  CoalescingClient::Done<v1::CheckpointResponse> For(int i) {
    return [this, i](absl::StatusOr<v1::CheckpointResponse> answer) {
      answers_[i] = std::move(answer);
      if (--pending_ == 0) all_.Notify();
    };
  }
  bool Wait() { return all_.WaitForNotificationWithTimeout(absl::Seconds(30)); }
  const absl::StatusOr<v1::CheckpointResponse>& operator[](int i) const {
    return answers_[i];
  }

 private:
  std::vector<absl::StatusOr<v1::CheckpointResponse>> answers_;
  std::atomic<int> pending_;
  absl::Notification all_;
};

std::vector<int> BatchSizes(const ScriptedNode& node) {
  std::vector<int> sizes;
  for (const auto& req :
       node.requests<v1::CheckpointBatchRequest>("CheckpointBatch")) {
    sizes.push_back(req.items_size());
  }
  return sizes;
}

TEST(CoalescingCheckpointTest, QueuedCallsShareABatchAndGetTheirOwnAnswers) {
  CheckpointNode server(Batches::kServed, /*hold_first=*/true);
  auto client = std::make_unique<CoalescingClient>(ChannelTo(server.address()),
                                                   Options());
  constexpr int kCalls = 8;
  Answers answers(kCalls);
  CheckpointBatchItem first = Item("k0", 100, "charged", "ch_42");
  first.lease_ms = 5000;
  client->CheckpointAsync(first, answers.For(0));
  server.WaitForFirstCall();
  for (int i = 1; i < kCalls; ++i) {
    // Item 3 is invalid: its caller alone gets the refusal, worded as a
    // unary Checkpoint's.
    client->CheckpointAsync(Item(absl::StrCat("k", i), 100 + i,
                                 i == 3 ? "" : absl::StrCat("step-", i)),
                            answers.For(i));
  }
  server.Open();
  ASSERT_TRUE(answers.Wait());
  for (int i = 0; i < kCalls; ++i) {
    if (i == 3) {
      EXPECT_EQ(answers[i].status(),
                absl::InvalidArgumentError("step: must not be empty"));
      continue;
    }
    ASSERT_TRUE(answers[i].ok()) << i << ": " << answers[i].status();
    EXPECT_EQ(answers[i]->status(), v1::CheckpointResponse::OK);
    EXPECT_EQ(answers[i]->fence(), uint64_t(100 + i)) << i;
  }
  EXPECT_THAT(BatchSizes(server.node()), ElementsAre(1, kCalls - 1));
  EXPECT_THAT(server.Methods(),
              ElementsAre("CheckpointBatch", "CheckpointBatch"));
  const v1::CheckpointRequest sent =
      server.node()
          .requests<v1::CheckpointBatchRequest>("CheckpointBatch")[0]
          .items(0);
  EXPECT_EQ(sent.namespace_(), "ckpt");
  EXPECT_EQ(sent.key(), "k0");
  EXPECT_EQ(sent.fence(), 100u);
  EXPECT_EQ(sent.step(), "charged");
  EXPECT_EQ(sent.data(), "ch_42");
  EXPECT_EQ(sent.lease_ms(), 5000u);
}

// Checkpoints of 64 KiB data: a batch closes before its items pass 3 MiB, so
// no request nears the 4 MiB message limit, even with room for 1000 items.
TEST(CoalescingCheckpointTest, LargeDataSplitsBatchesByBytes) {
  CheckpointNode server(Batches::kServed, /*hold_first=*/true);
  auto client = std::make_unique<CoalescingClient>(
      ChannelTo(server.address()), Options(1, /*max_items=*/1000));
  constexpr int kCalls = 101;
  const std::string data(64 << 10, 'd');
  Answers answers(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    client->CheckpointAsync(Item(absl::StrCat("k", i), 1, "s", data),
                            answers.For(i));
    if (i == 0) server.WaitForFirstCall();
  }
  server.Open();
  ASSERT_TRUE(answers.Wait());
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_TRUE(answers[i].ok()) << i << ": " << answers[i].status();
  }
  const std::vector<int> sizes = BatchSizes(server.node());
  ASSERT_EQ(sizes.size(), 4u) << ::testing::PrintToString(sizes);
  EXPECT_EQ(sizes[0], 1);
  // 3 MiB holds 47 such items.
  EXPECT_EQ(sizes[1], 47);
  EXPECT_EQ(sizes[2], 47);
  EXPECT_EQ(sizes[3], kCalls - 1 - 2 * 47);
  for (const auto& req :
       server.node().requests<v1::CheckpointBatchRequest>("CheckpointBatch")) {
    EXPECT_LE(req.ByteSizeLong(), size_t{3} << 20);
  }
}

// A follower names the leader; there, one item's outcome is unknown and
// another's node is briefly unavailable: both go again, unchanged, and the
// leader is remembered for later batches.
TEST(CoalescingCheckpointTest, BatchesFollowTheLeaderAndResendUnsettledItems) {
  ScriptedNode follower, leader;
  follower.SetScript(FollowerOf(leader.address()));
  struct Seen {
    absl::Mutex mu;
    std::map<std::string, int> count ABSL_GUARDED_BY(mu);
  };
  auto seen = std::make_shared<Seen>();
  leader.SetScript([seen](const std::string& method, grpc::ServerContext*,
                          const Message& request, Message* response) {
    if (method != "CheckpointBatch") {
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, method);
    }
    const auto& q = static_cast<const v1::CheckpointBatchRequest&>(request);
    auto* r = static_cast<v1::CheckpointBatchResponse*>(response);
    absl::MutexLock lock(&seen->mu);
    for (const v1::CheckpointRequest& item : q.items()) {
      auto* out = r->add_items();
      const bool first = seen->count[item.key()]++ == 0;
      if (first && (item.key() == "aborted" || item.key() == "unavailable")) {
        out->mutable_error()->set_code(static_cast<int>(
            item.key() == "aborted" ? grpc::StatusCode::ABORTED
                                    : grpc::StatusCode::UNAVAILABLE));
        out->mutable_error()->set_message("leadership lost");
        continue;
      }
      out->mutable_response()->set_status(v1::CheckpointResponse::OK);
      out->mutable_response()->set_fence(item.fence());
    }
    return grpc::Status::OK;
  });
  CoalescingClient client(std::vector<std::string>{follower.address()},
                          Options());
  Answers answers(3);
  client.CheckpointAsync(Item("aborted", 7, "a", "da"), answers.For(0));
  client.CheckpointAsync(Item("unavailable", 8, "u", "du"), answers.For(1));
  client.CheckpointAsync(Item("fine", 9, "f", "df"), answers.For(2));
  ASSERT_TRUE(answers.Wait());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(answers[i].ok()) << i << ": " << answers[i].status();
    EXPECT_EQ(answers[i]->fence(), uint64_t(7 + i));
  }
  // Each of the first two items was sent twice, byte for byte the same.
  std::map<std::string, std::vector<std::string>> sent;
  for (const auto& req :
       leader.requests<v1::CheckpointBatchRequest>("CheckpointBatch")) {
    for (const v1::CheckpointRequest& item : req.items()) {
      sent[item.key()].push_back(item.SerializeAsString());
    }
  }
  ASSERT_EQ(sent["aborted"].size(), 2u);
  EXPECT_EQ(sent["aborted"][0], sent["aborted"][1]);
  ASSERT_EQ(sent["unavailable"].size(), 2u);
  EXPECT_EQ(sent["unavailable"][0], sent["unavailable"][1]);
  EXPECT_EQ(sent["fine"].size(), 1u);

  const size_t follower_calls = follower.calls().size();
  ASSERT_TRUE(client.Checkpoint(Item("later", 10)).ok());
  EXPECT_EQ(follower.calls().size(), follower_calls);
}

TEST(CoalescingCheckpointTest, AnItemStillUnknownAfterItsRetriesSaysSo) {
  ScriptedNode node;
  node.SetScript([](const std::string&, grpc::ServerContext* context,
                    const Message&,
                    Message*) { return OutcomeUnknown(context); });
  CoalescingClient client(std::vector<std::string>{node.address()}, Options());
  absl::StatusOr<v1::CheckpointResponse> answer =
      client.Checkpoint(Item("k", 1));
  EXPECT_TRUE(IsOutcomeUnknown(answer.status())) << answer.status();
  EXPECT_THAT(std::string(answer.status().message()),
              StartsWith("Checkpoint:"));
  EXPECT_EQ(node.calls().size(), 4u);  // FastRetries: 4 rounds
}

class UnaryFallbackTest : public ::testing::TestWithParam<Batches> {};

// The first batch is refused as by a server without CheckpointBatch while
// more calls queue behind it: every one of them is answered through unary
// Checkpoints, each with its own answer, and later calls go unary at once.
TEST_P(UnaryFallbackTest, ItemsGoUnaryAndLaterCallsToo) {
  CheckpointNode server(GetParam(), /*hold_first=*/true);
  auto client = std::make_unique<CoalescingClient>(ChannelTo(server.address()),
                                                   Options());
  constexpr int kCalls = 6;
  Answers answers(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    client->CheckpointAsync(
        Item(absl::StrCat("k", i), 10 + i, i == 2 ? "" : "step"),
        answers.For(i));
    if (i == 0) server.WaitForFirstCall();
  }
  server.Open();
  ASSERT_TRUE(answers.Wait());
  for (int i = 0; i < kCalls; ++i) {
    if (i == 2) {
      EXPECT_EQ(answers[i].status(),
                absl::InvalidArgumentError("step: must not be empty"));
      continue;
    }
    ASSERT_TRUE(answers[i].ok()) << i << ": " << answers[i].status();
    EXPECT_EQ(answers[i]->fence(), uint64_t(10 + i));
  }
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<v1::CheckpointResponse> later =
        client->Checkpoint(Item("later", 20 + i));
    ASSERT_TRUE(later.ok()) << later.status();
    EXPECT_EQ(later->fence(), uint64_t(20 + i));
  }
  std::vector<std::string> methods = server.Methods();
  ASSERT_FALSE(methods.empty());
  EXPECT_EQ(methods[0], "CheckpointBatch");
  methods.erase(methods.begin());
  EXPECT_EQ(methods, std::vector<std::string>(kCalls + 3, "Checkpoint"));
  std::vector<std::string> keys;
  for (const auto& req :
       server.node().requests<v1::CheckpointRequest>("Checkpoint")) {
    keys.push_back(req.key());
  }
  EXPECT_THAT(keys, UnorderedElementsAre("k0", "k1", "k2", "k3", "k4", "k5",
                                         "later", "later", "later"));
}

// An older group: the follower the client knows refuses CheckpointBatch,
// its unary Checkpoint names the leader, and the leader's first answer is an
// unknown outcome. The unary calls follow the leader, re-send the item
// unchanged, and stay with the leader.
TEST_P(UnaryFallbackTest, UnaryCallsFollowTheLeaderAndRetry) {
  ScriptedNode follower, leader;
  const grpc::Status refused =
      GetParam() == Batches::kUnimplemented
          ? grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "")
          : grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, kOlderDedupdReply);
  follower.SetScript([&leader, refused](const std::string& method,
                                        grpc::ServerContext* context,
                                        const Message&, Message*) {
    if (method == "CheckpointBatch") return refused;
    return NotLeader(context, leader.address());
  });
  leader.SetScript(UnknownThen(
      "Checkpoint", 1,
      [refused](const std::string& method, grpc::ServerContext*,
                const Message& request, Message* response) {
        if (method != "Checkpoint") return refused;
        auto* r = static_cast<v1::CheckpointResponse*>(response);
        r->set_status(v1::CheckpointResponse::OK);
        r->set_fence(
            static_cast<const v1::CheckpointRequest&>(request).fence());
        return grpc::Status::OK;
      }));
  CoalescingClient client(std::vector<std::string>{follower.address()},
                          Options());
  absl::StatusOr<v1::CheckpointResponse> first =
      client.Checkpoint(Item("k", 5, "charged", "ch_1"));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->fence(), 5u);
  absl::StatusOr<v1::CheckpointResponse> second =
      client.Checkpoint(Item("k", 5, "shipped", "sh_1"));
  ASSERT_TRUE(second.ok()) << second.status();

  auto methods = [](const ScriptedNode& node) {
    std::vector<std::string> out;
    for (const auto& call : node.calls()) out.push_back(call.method);
    return out;
  };
  EXPECT_THAT(methods(follower), ElementsAre("CheckpointBatch", "Checkpoint"));
  EXPECT_THAT(methods(leader),
              ElementsAre("Checkpoint", "Checkpoint", "Checkpoint"));
  const auto at_leader = leader.requests<v1::CheckpointRequest>("Checkpoint");
  ASSERT_EQ(at_leader.size(), 3u);
  EXPECT_EQ(at_leader[0].SerializeAsString(), at_leader[1].SerializeAsString());
  EXPECT_EQ(at_leader[1].step(), "charged");
  EXPECT_EQ(at_leader[2].step(), "shipped");
}

INSTANTIATE_TEST_SUITE_P(Servers, UnaryFallbackTest,
                         ::testing::Values(Batches::kUnimplemented,
                                           Batches::kOlderDedupd),
                         [](const ::testing::TestParamInfo<Batches>& info) {
                           return info.param == Batches::kUnimplemented
                                      ? "Unimplemented"
                                      : "OlderDedupd";
                         });

// The client's own UTF-8 check (whether a request refused as unparseable
// could have been parsed) must agree with protobuf's, which dedupd parses
// with: every string of up to 3 bytes, and 4-byte ones around the limits.
TEST(IsValidUtf8Test, AgreesWithProtobuf) {
  auto agree = [](const std::string& s) {
    return IsValidUtf8(s) ==
           google::protobuf::internal::IsStructurallyValidUTF8(s);
  };
  int disagreements = 0;
  std::string s;
  for (int a = 0; a < 256; ++a) {
    s.assign(1, static_cast<char>(a));
    disagreements += !agree(s);
    for (int b = 0; b < 256; ++b) {
      s.assign({static_cast<char>(a), static_cast<char>(b)});
      disagreements += !agree(s);
      for (int c = 0; c < 256; ++c) {
        s.assign(
            {static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)});
        disagreements += !agree(s);
      }
    }
  }
  for (int a = 0xF0; a <= 0xF8; ++a) {
    for (int b = 0; b < 256; ++b) {
      for (int c : {0x7F, 0x80, 0xBF, 0xC0}) {
        for (int d : {0x7F, 0x80, 0xBF, 0xC0}) {
          s.assign({static_cast<char>(a), static_cast<char>(b),
                    static_cast<char>(c), static_cast<char>(d)});
          disagreements += !agree(s);
        }
      }
    }
  }
  EXPECT_EQ(disagreements, 0);
  EXPECT_TRUE(IsValidUtf8("ascii, \xc3\xa9, \xe2\x82\xac, \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xc0\x80"));          // overlong NUL
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
}

class CoalescingCheckpointIntegrationTest
    : public testing::SharedDedupdTest<CoalescingCheckpointIntegrationTest> {
 public:
  static std::vector<std::string> Flags() {
    return {"--durability=sync", "--metrics_address=127.0.0.1:0"};
  }

 protected:
  void SetUp() override {
    SharedDedupdTest::SetUp();
    if (HasFatalFailure()) return;
    client_ = std::make_unique<Client>(server().address());
  }

  // RPCs the server answered for `method` so far (0 before the first).
  static double Rpcs(const std::string& method) {
    absl::StatusOr<double> n = testing::ScrapeSample(
        server().metrics_port(),
        absl::StrCat("dedup_request_duration_seconds_count{method=\"", method,
                     "\"}"));
    if (absl::IsNotFound(n.status())) return 0;
    EXPECT_TRUE(n.ok()) << n.status();
    return n.value_or(-1);
  }

  // Begins `key` for `owner` with a short lease; its fence.
  uint64_t BeginFor(const std::string& key, const std::string& owner,
                    uint32_t lease_ms = 1000) {
    BeginOptions options;
    options.owner = owner;
    options.lease_ms = lease_ms;
    absl::StatusOr<v1::BeginResponse> begun =
        client_->Begin("ckpt", key, "args", options);
    EXPECT_TRUE(begun.ok()) << begun.status();
    EXPECT_EQ(begun.value_or(v1::BeginResponse()).status(),
              v1::BeginResponse::STARTED);
    return begun.ok() ? begun->fence() : 0;
  }

  // Begins `key` for `owner` until the previous owner's lease has run out
  // and this Begin takes over (polled: at most 10 s).
  v1::BeginResponse TakeOver(const std::string& key, const std::string& owner) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    BeginOptions options;
    options.owner = owner;
    while (absl::Now() < deadline) {
      absl::StatusOr<v1::BeginResponse> begun =
          client_->Begin("ckpt", key, "args", options);
      if (!begun.ok()) {
        ADD_FAILURE() << begun.status();
        break;
      }
      if (begun->status() != v1::BeginResponse::IN_USE) return *begun;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << key << " was not taken over in 10 s";
    return {};
  }

  std::unique_ptr<Client> client_;
};

// 16 threads record 15 checkpoints each on their own keys, concurrently:
// every one is OK, they travel in fewer CheckpointBatch RPCs than calls (no
// unary Checkpoint), and a takeover of each key resumes from its last one.
TEST_F(CoalescingCheckpointIntegrationTest,
       ConcurrentCheckpointsShareBatchesAndATakeoverSeesTheLast) {
  CoalescingClient coalescing(ChannelTo(server().address()), Options(2));
  constexpr int kThreads = 16;
  constexpr int kRounds = 15;
  std::vector<uint64_t> fences(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    fences[t] = BeginFor(absl::StrCat(TestName(), "/", t), "first");
  }
  const double unary_before = Rpcs("Checkpoint");
  const double batches_before = Rpcs("CheckpointBatch");
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        CheckpointBatchItem item =
            Item(absl::StrCat(TestName(), "/", t), fences[t],
                 absl::StrCat("step-", r), absl::StrCat("data-", t, "-", r));
        item.lease_ms = 1000;
        absl::StatusOr<v1::CheckpointResponse> done =
            coalescing.Checkpoint(item);
        if (!done.ok() || done->status() != v1::CheckpointResponse::OK ||
            done->fence() != fences[t]) {
          ADD_FAILURE() << t << "/" << r << ": "
                        << (done.ok() ? done->DebugString()
                                      : done.status().ToString());
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Rpcs("Checkpoint"), unary_before);
  const double batches = Rpcs("CheckpointBatch") - batches_before;
  EXPECT_GT(batches, 0);
  EXPECT_LT(batches, kThreads * kRounds * 2 / 3.0);

  for (int t = 0; t < kThreads; ++t) {
    const v1::BeginResponse taken =
        TakeOver(absl::StrCat(TestName(), "/", t), "second");
    EXPECT_EQ(taken.status(), v1::BeginResponse::STARTED) << t;
    EXPECT_TRUE(taken.takeover()) << t;
    EXPECT_EQ(taken.checkpoint().step(), absl::StrCat("step-", kRounds - 1));
    EXPECT_EQ(taken.checkpoint().data(),
              absl::StrCat("data-", t, "-", kRounds - 1));
    EXPECT_EQ(taken.checkpoint().fence(), fences[t]);
  }
}

// Items sent together get their own answers: OK, STALE_FENCE (an owner that
// was taken over), NOT_FOUND, ALREADY_COMPLETED, and INVALID_ARGUMENT naming
// `step` for an empty one, which changes nothing.
TEST_F(CoalescingCheckpointIntegrationTest, EachItemGetsItsOwnAnswer) {
  const std::string live = TestName() + "/live";
  const std::string taken = TestName() + "/taken";
  const std::string done = TestName() + "/done";
  const uint64_t live_fence = BeginFor(live, "a");
  const uint64_t old_fence = BeginFor(taken, "a", /*lease_ms=*/100);
  const uint64_t new_fence = TakeOver(taken, "b").fence();
  ASSERT_GT(new_fence, old_fence);
  const uint64_t done_fence = BeginFor(done, "a");
  ASSERT_TRUE(
      client_->Complete("ckpt", done, done_fence, v1::SUCCESS, "r").ok());

  CoalescingClient coalescing(ChannelTo(server().address()), Options());
  const double unary_before = Rpcs("Checkpoint");
  const double batches_before = Rpcs("CheckpointBatch");
  std::vector<CheckpointBatchItem> items = {
      Item(live, live_fence, "charged", "ch_42"),
      Item(taken, old_fence, "late"),
      Item(live, live_fence, ""),
      Item(taken, new_fence, "resumed"),
      Item(TestName() + "/never", 1),
      Item(done, done_fence),
  };
  for (int i = 0; i < 6; ++i) {
    items.push_back(Item(live, live_fence, "charged", "ch_42"));
  }
  Answers answers(static_cast<int>(items.size()));
  for (size_t i = 0; i < items.size(); ++i) {
    coalescing.CheckpointAsync(items[i], answers.For(static_cast<int>(i)));
  }
  ASSERT_TRUE(answers.Wait());
  auto status_of = [&](int i) {
    EXPECT_TRUE(answers[i].ok()) << i << ": " << answers[i].status();
    return answers[i].ok() ? answers[i]->status()
                           : v1::CheckpointResponse::STATUS_UNSPECIFIED;
  };
  EXPECT_EQ(status_of(0), v1::CheckpointResponse::OK);
  EXPECT_EQ(status_of(1), v1::CheckpointResponse::STALE_FENCE);
  EXPECT_EQ(answers[1].value_or(v1::CheckpointResponse()).fence(), new_fence);
  EXPECT_EQ(answers[2].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(answers[2].status().message()), StartsWith("step:"));
  EXPECT_EQ(status_of(3), v1::CheckpointResponse::OK);
  EXPECT_EQ(status_of(4), v1::CheckpointResponse::NOT_FOUND);
  EXPECT_EQ(status_of(5), v1::CheckpointResponse::ALREADY_COMPLETED);
  for (size_t i = 6; i < items.size(); ++i) {
    EXPECT_EQ(status_of(static_cast<int>(i)), v1::CheckpointResponse::OK);
  }
  EXPECT_EQ(Rpcs("Checkpoint"), unary_before);
  EXPECT_GT(Rpcs("CheckpointBatch"), batches_before);

  absl::StatusOr<v1::GetResponse> got = client_->Get("ckpt", live);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->record().checkpoint().step(), "charged");
  EXPECT_EQ(got->record().checkpoint().data(), "ch_42");
  got = client_->Get("ckpt", taken);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->record().checkpoint().step(), "resumed");
}

// dedupd refuses a whole request it cannot parse (a key that is not UTF-8)
// as "request: cannot be parsed": that caller alone gets the refusal, and
// later Checkpoints still go in batches.
TEST_F(CoalescingCheckpointIntegrationTest, AKeyThatIsNotUtf8FailsAlone) {
  const std::string key = TestName();
  const uint64_t fence = BeginFor(key, "a");
  CoalescingClient coalescing(ChannelTo(server().address()), Options());
  Answers answers(3);
  coalescing.CheckpointAsync(Item(key, fence, "one"), answers.For(0));
  coalescing.CheckpointAsync(Item(key + "\xc0\x80", fence), answers.For(1));
  coalescing.CheckpointAsync(Item(key, fence, "two"), answers.For(2));
  ASSERT_TRUE(answers.Wait());
  EXPECT_TRUE(answers[0].ok()) << answers[0].status();
  EXPECT_EQ(answers[1].status().code(), absl::StatusCode::kInvalidArgument)
      << answers[1].status();
  EXPECT_THAT(std::string(answers[1].status().message()),
              StartsWith("request: cannot be parsed"));
  EXPECT_TRUE(answers[2].ok()) << answers[2].status();

  const double unary_before = Rpcs("Checkpoint");
  const double batches_before = Rpcs("CheckpointBatch");
  absl::StatusOr<v1::CheckpointResponse> later =
      coalescing.Checkpoint(Item(key, fence, "three"));
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(later->status(), v1::CheckpointResponse::OK);
  EXPECT_EQ(Rpcs("Checkpoint"), unary_before);
  EXPECT_EQ(Rpcs("CheckpointBatch"), batches_before + 1);
}

// RunOnce with RunOptions::coalescing: Claim::Checkpoint goes in
// CheckpointBatch RPCs; a takeover resumes from it, and the stalled owner's
// late checkpoint is refused (its claim is lost).
TEST_F(CoalescingCheckpointIntegrationTest, RunOnceCheckpointsThroughIt) {
  CoalescingClient coalescing(ChannelTo(server().address()), Options());
  const double unary_before = Rpcs("Checkpoint");
  const double batches_before = Rpcs("CheckpointBatch");
  RunOptions slow;
  slow.lease_ms = 100;
  slow.renew = false;  // the first owner stalls and loses its lease
  slow.coalescing = &coalescing;
  std::optional<v1::CheckpointInfo> resumed_from;
  absl::Status late_checkpoint;
  absl::StatusOr<RunResult> first = RunOnce(
      *client_, "ckpt", TestName(), "args",
      [&](const Claim& claim) {
        EXPECT_TRUE(claim.Checkpoint("charged", "ch_42").ok());
        // Another worker waits out the lease, takes over and resumes.
        RunOptions other;
        other.coalescing = &coalescing;
        absl::StatusOr<RunResult> second = RunOnce(
            *client_, "ckpt", TestName(), "args",
            [&](const Claim& takeover) {
              EXPECT_TRUE(takeover.takeover);
              resumed_from = takeover.last_checkpoint;
              EXPECT_TRUE(takeover.Checkpoint("shipping", "sh_1").ok());
              return ExecResult::Success("shipped after charge ch_42");
            },
            other);
        EXPECT_TRUE(second.ok()) << second.status();
        late_checkpoint = claim.Checkpoint("shipped", "");
        return ExecResult::Success("too late");
      },
      slow);
  ASSERT_TRUE(resumed_from.has_value());
  EXPECT_EQ(resumed_from->step(), "charged");
  EXPECT_EQ(resumed_from->data(), "ch_42");
  EXPECT_TRUE(IsClaimLost(late_checkpoint)) << late_checkpoint;
  EXPECT_TRUE(IsClaimLost(first.status())) << first.status();
  EXPECT_EQ(Rpcs("Checkpoint"), unary_before);
  EXPECT_EQ(Rpcs("CheckpointBatch"), batches_before + 3);
}

}  // namespace
}  // namespace dedup
