// CoalescingClient's Checkpoints against scripted in-process nodes: they
// leave as CheckpointBatch RPCs capped by bytes, each caller gets its own
// item's answer, items are retried the safe way, and a server without
// CheckpointBatch (UNIMPLEMENTED, or the "cannot be parsed" answer every
// dedupd with Checkpoint but not CheckpointBatch gives) gets unary
// Checkpoints instead, for good. Also the client's UTF-8 check, which keeps
// items the server could not parse out of batches. Against the real dedupd:
// coalescing_checkpoint_integration_test.cc.
#include <atomic>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/batch_answers.h"
#include "client/coalescing_client.h"
#include "client/dedup_client.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/stubs/common.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/client/coalescing_checkpoint_helpers.h"
#include "tests/client/failover_helpers.h"
#include "tests/client/scripted_node.h"

namespace dedup {
namespace coalescing_checkpoint_test {
namespace {

using ::dedup::checkpoint_test::Answers;
using ::dedup::checkpoint_test::ChannelTo;
using ::dedup::checkpoint_test::Item;
using ::dedup::checkpoint_test::Options;
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

// The client's own UTF-8 check (which items may join a batch: the server
// refuses a whole request it cannot parse) must agree with protobuf's, which
// dedupd parses with: every string of up to 3 bytes, and 4-byte ones around
// the limits.
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

// StringsAreValidUtf8 checks every string field of the request, so that a
// field added to the proto cannot slip an unparseable item into a batch, and
// no bytes field (args_hash, result, data hold any bytes).
template <typename Request>
void ExpectStringFieldsChecked() {
  const google::protobuf::Descriptor* descriptor = Request::descriptor();
  EXPECT_TRUE(StringsAreValidUtf8(Request()));
  int seen = 0;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    const auto type = field->type();
    if (type != google::protobuf::FieldDescriptor::TYPE_STRING &&
        type != google::protobuf::FieldDescriptor::TYPE_BYTES) {
      continue;
    }
    ASSERT_FALSE(field->is_repeated()) << field->full_name();
    Request request;
    request.GetReflection()->SetString(&request, field, "x\xff");
    if (type == google::protobuf::FieldDescriptor::TYPE_STRING) {
      ++seen;
      EXPECT_FALSE(StringsAreValidUtf8(request)) << field->full_name();
    } else {
      EXPECT_TRUE(StringsAreValidUtf8(request)) << field->full_name();
    }
  }
  EXPECT_GE(seen, 2) << descriptor->full_name();  // namespace, key
}

TEST(IsValidUtf8Test, StringsAreValidUtf8ChecksEveryStringField) {
  ExpectStringFieldsChecked<v1::BeginRequest>();
  ExpectStringFieldsChecked<v1::CompleteRequest>();
  ExpectStringFieldsChecked<v1::CheckpointRequest>();
}

}  // namespace
}  // namespace coalescing_checkpoint_test
}  // namespace dedup
