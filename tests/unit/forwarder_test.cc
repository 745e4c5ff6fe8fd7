// Forwarding in one process over loopback gRPC: a node whose store refuses
// some keys with a leader hint (as a GroupRouter refuses the keys of groups
// it does not lead) sends those on to the leader, batch items included, one
// sub-batch per leader with every answer back in its place; the leader's
// unknown outcome (ABORTED + dedup-outcome) reaches the caller as is.
#include "server/forwarder.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "replication/group_router.h"
#include "replication/member_directory.h"
#include "replication/shard_layout.h"
#include "server/auth.h"
#include "server/dedup_service.h"
#include "server/metrics.h"
#include "storage/store.h"
#include "tests/testing/server_process.h"

namespace dedup {
namespace forwarder_test {
namespace {

// On a node (`leader` given): keys starting "remote" belong to another
// node's group and are refused naming `leader`, as a GroupRouter refuses
// the keys of groups it does not lead. On the leader (`leader` empty): keys
// containing "unknown" are answered as by a leader that lost leadership
// mid-way (ABORTED, dedup-outcome: unknown). The rest go to a real store.
//
// `moved_to` (any node): keys containing `moved_word` are refused as by a
// member whose group's leadership moved to `moved_to` (node 3), in the
// words of MemberDirectory::NotLeader; keys containing "quiet" then
// `moved_word` name it in the payload only. `not_serving` (a node):
// CheckServing refuses naming `leader`, so whole calls go there.
class SplitStore final : public Store {
 public:
  SplitStore(Store* local, std::string leader, std::string moved_to = "",
             std::string moved_word = "moved", bool not_serving = false)
      : local_(local),
        leader_(std::move(leader)),
        moved_to_(moved_to),
        moved_word_(std::move(moved_word)),
        not_serving_(not_serving) {
    moved_.Reload({{3, std::move(moved_to)}});
  }

  absl::Status CheckServing() const override {
    if (!not_serving_) return absl::OkStatus();
    absl::Status s = absl::UnavailableError("not the leader of any group");
    s.SetPayload(kLeaderAddressPayload, absl::Cord(leader_));
    return s;
  }

  absl::Status Refusal(absl::string_view key) const {
    if (!moved_to_.empty() &&
        absl::StrContains(key, absl::StrCat("quiet", moved_word_))) {
      // The leader only in the payload (ItemError.leader), not the words.
      absl::Status s = absl::UnavailableError("not the leader");
      s.SetPayload(kLeaderAddressPayload, absl::Cord(moved_to_));
      return s;
    }
    if (!moved_to_.empty() && absl::StrContains(key, moved_word_)) {
      return moved_.NotLeader(3);
    }
    if (leader_.empty() && absl::StrContains(key, "unknown")) {
      absl::Status s = absl::AbortedError("leadership lost");
      s.SetPayload(kOutcomeUnknownPayload, absl::Cord("unknown"));
      return s;
    }
    if (leader_.empty() || !absl::StartsWith(key, "remote")) {
      return absl::OkStatus();
    }
    absl::Status s = absl::UnavailableError("not the leader of this group");
    s.SetPayload(kLeaderAddressPayload, absl::Cord(leader_));
    return s;
  }

  void Begin(std::string ns, std::string key, BeginParams params,
             int64_t wait_ms, StoreCallback<BeginResult> done) override {
    if (absl::Status s = Refusal(key); !s.ok()) return std::move(done)(s);
    local_->Begin(ns, key, params, wait_ms, std::move(done));
  }
  void Complete(std::string ns, std::string key, CompleteParams params,
                StoreCallback<FencedDecision> done) override {
    if (absl::Status s = Refusal(key); !s.ok()) return std::move(done)(s);
    local_->Complete(ns, key, params, std::move(done));
  }
  void Release(std::string ns, std::string key, uint64_t fence,
               StoreCallback<FencedDecision> done) override {
    if (absl::Status s = Refusal(key); !s.ok()) return std::move(done)(s);
    local_->Release(ns, key, fence, std::move(done));
  }
  void Renew(std::string ns, std::string key, uint64_t fence, int64_t lease_ms,
             StoreCallback<FencedDecision> done) override {
    if (absl::Status s = Refusal(key); !s.ok()) return std::move(done)(s);
    local_->Renew(ns, key, fence, lease_ms, std::move(done));
  }
  void Checkpoint(std::string ns, std::string key, CheckpointParams params,
                  StoreCallback<FencedDecision> done) override {
    if (absl::Status s = Refusal(key); !s.ok()) return std::move(done)(s);
    local_->Checkpoint(ns, key, params, std::move(done));
  }
  void BeginMany(std::vector<BeginCall> calls) override {
    std::vector<BeginCall> mine;
    for (BeginCall& call : calls) {
      if (absl::Status s = Refusal(call.key); !s.ok()) {
        std::move(call.done)(s);
      } else {
        mine.push_back(std::move(call));
      }
    }
    local_->BeginMany(std::move(mine));
  }
  void CompleteMany(std::vector<CompleteCall> calls) override {
    std::vector<CompleteCall> mine;
    for (CompleteCall& call : calls) {
      if (absl::Status s = Refusal(call.key); !s.ok()) {
        std::move(call.done)(s);
      } else {
        mine.push_back(std::move(call));
      }
    }
    local_->CompleteMany(std::move(mine));
  }
  void Get(std::string ns, std::string key,
           StoreCallback<std::optional<Record>> done) override {
    if (absl::Status s = Refusal(key); !s.ok()) return std::move(done)(s);
    local_->Get(ns, key, std::move(done));
  }
  void Forget(std::string ns, std::string key,
              StoreCallback<bool> done) override {
    if (absl::Status s = Refusal(key); !s.ok()) return std::move(done)(s);
    local_->Forget(ns, key, std::move(done));
  }
  void DrainWaiters() override { local_->DrainWaiters(); }
  absl::Status Close() override { return absl::OkStatus(); }
  absl::Status CompactAll() override { return local_->CompactAll(); }
  StoreStats Stats() override { return local_->Stats(); }
  absl::StatusOr<uint64_t> CountStoredRecords() override {
    return local_->CountStoredRecords();
  }

 private:
  Store* const local_;
  const std::string leader_;
  const std::string moved_to_;
  const std::string moved_word_;
  const bool not_serving_;
  MemberDirectory moved_{{}};
};

// A store, the Dedup service over it, and a gRPC server on loopback.
struct Node {
  std::string dir;
  std::unique_ptr<Store> store;
  std::unique_ptr<Store> split;  // what the service serves from
  Metrics metrics{{}};
  Authorizer auth{metrics.registry().get()};
  std::unique_ptr<Forwarder> forwarder;
  std::unique_ptr<DedupService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;

  ~Node() {
    if (server != nullptr) server->Shutdown();
    store.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
};

class ForwarderTest : public ::testing::Test {
 public:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Start(&leader_, ""));
    ASSERT_NO_FATAL_FAILURE(Start(&node_, leader_.address));
  }

  // `leader`: "" for the leader, else the node refuses "remote*" keys
  // naming it and forwards them there.
  void Start(Node* node, const std::string& leader,
             const std::string& moved_to = "",
             const std::string& moved_word = "moved",
             bool not_serving = false) {
    ASSERT_NO_FATAL_FAILURE(OpenStore(node));
    node->split = std::make_unique<SplitStore>(
        node->store.get(), leader, moved_to, moved_word, not_serving);
    ASSERT_NO_FATAL_FAILURE(Serve(node, /*forwarding=*/!leader.empty()));
  }

  static void OpenStore(Node* node) {
    absl::StatusOr<std::string> dir = testing::MakeTempDir("dedup-forwarder");
    ASSERT_TRUE(dir.ok()) << dir.status();
    node->dir = *dir;
    StoreOptions options;
    options.path = node->dir;
    options.durability = Durability::kNone;
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    node->store = *std::move(store);
  }

  // Serves node->split through a DedupService on a loopback port.
  static void Serve(Node* node, bool forwarding) {
    node->service = std::make_unique<DedupService>(node->split.get(), Limits(),
                                                   &node->metrics, &node->auth,
                                                   /*events=*/nullptr);
    if (forwarding) {
      ForwarderOptions forward;
      forward.node_id = 2;
      forward.self_address = "self:1";
      forward.open = [](const std::string& address) {
        return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
      };
      forward.registry = node->metrics.registry().get();
      node->forwarder = std::make_unique<Forwarder>(std::move(forward));
      node->service->EnableForwarding(node->forwarder.get());
    }
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(node->service.get());
    node->server = builder.BuildAndStart();
    ASSERT_NE(node->server, nullptr);
    node->address = absl::StrCat("127.0.0.1:", port);
  }

  std::unique_ptr<v1::Dedup::Stub> Stub(const Node& node) {
    return v1::Dedup::NewStub(
        grpc::CreateChannel(node.address, grpc::InsecureChannelCredentials()));
  }

  static v1::BeginRequest BeginOf(const std::string& key) {
    v1::BeginRequest r;
    r.set_namespace_("ns");
    r.set_key(key);
    r.set_args_hash("h");
    r.set_owner("o");
    return r;
  }

  // Whether `key` is stored in `node`'s own store (not through the service).
  static bool Holds(Node& node, const std::string& key) {
    auto found = std::make_shared<std::atomic<int>>(-1);
    node.store->Get("ns", key,
                    [found](absl::StatusOr<std::optional<Record>> r) {
                      found->store(r.ok() && r->has_value() ? 1 : 0);
                    });
    for (int i = 0; i < 500 && found->load() < 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return found->load() == 1;
  }

  static std::string Trailer(const grpc::ClientContext& context,
                             const std::string& key) {
    const auto& trailers = context.GetServerTrailingMetadata();
    auto it = trailers.find(key);
    return it == trailers.end()
               ? "<none>"
               : std::string(it->second.data(), it->second.size());
  }

  Node leader_;
  Node node_;
};

void Deadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(5));
}

TEST_F(ForwarderTest, ItemsRefusedWithAHintGoToTheLeaderInTheirPlaces) {
  v1::BeginBatchRequest begins;
  for (const char* key :
       {"local-0", "remote-1", "local-2", "remote-3", "remote-4"}) {
    *begins.add_items() = BeginOf(key);
  }
  grpc::ClientContext context;
  Deadline(&context);
  v1::BeginBatchResponse begun;
  grpc::Status s = Stub(node_)->BeginBatch(&context, begins, &begun);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(begun.items_size(), 5);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(begun.items(i).has_response())
        << i << ": " << begun.items(i).error().message();
    EXPECT_EQ(begun.items(i).response().status(), v1::BeginResponse::STARTED);
    const std::string& key = begins.items(i).key();
    const bool remote = absl::StartsWith(key, "remote");
    EXPECT_EQ(Holds(leader_, key), remote) << key;
    EXPECT_EQ(Holds(node_, key), !remote) << key;
  }

  v1::CheckpointBatchRequest checkpoints;
  v1::CompleteBatchRequest completes;
  for (int i = 0; i < 5; ++i) {
    v1::CheckpointRequest* c = checkpoints.add_items();
    c->set_namespace_("ns");
    c->set_key(begins.items(i).key());
    c->set_fence(begun.items(i).response().fence());
    c->set_step("s");
    v1::CompleteRequest* d = completes.add_items();
    d->set_namespace_("ns");
    d->set_key(begins.items(i).key());
    // A wrong fence for item 3: its own answer, in its place.
    d->set_fence(begun.items(i).response().fence() + (i == 3 ? 5 : 0));
    d->set_outcome(v1::SUCCESS);
  }
  grpc::ClientContext checkpoint_context;
  Deadline(&checkpoint_context);
  v1::CheckpointBatchResponse checkpointed;
  s = Stub(node_)->CheckpointBatch(&checkpoint_context, checkpoints,
                                   &checkpointed);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(checkpointed.items_size(), 5);
  for (const auto& item : checkpointed.items()) {
    EXPECT_EQ(item.response().status(), v1::CheckpointResponse::OK)
        << item.error().message();
  }
  grpc::ClientContext complete_context;
  Deadline(&complete_context);
  v1::CompleteBatchResponse completed;
  s = Stub(node_)->CompleteBatch(&complete_context, completes, &completed);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(completed.items_size(), 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(
        completed.items(i).response().status(),
        i == 3 ? v1::CompleteResponse::STALE_FENCE : v1::CompleteResponse::OK)
        << i << ": " << completed.items(i).error().message();
  }
}

TEST_F(ForwarderTest, AUnaryCallGoesToTheLeaderWhoseAnswerIsRelayed) {
  grpc::ClientContext context;
  Deadline(&context);
  v1::BeginResponse begun;
  grpc::Status s = Stub(node_)->Begin(&context, BeginOf("remote-u"), &begun);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(begun.status(), v1::BeginResponse::STARTED);
  EXPECT_EQ(Trailer(context, "dedup-leader"), leader_.address);
  EXPECT_TRUE(Holds(leader_, "remote-u"));
  EXPECT_FALSE(Holds(node_, "remote-u"));
}

// Two nodes, each leading one of two groups through a real GroupRouter: a
// batch of keys of both groups through either node lands every key in its
// group's store, each answer in its place.
TEST(ForwarderRouterTest, ABatchOverTwoGroupsLandsEachKeyInItsGroup) {
  absl::StatusOr<ShardLayout> layout = FoundingLayout({1, 2}, 2, 1);
  ASSERT_TRUE(layout.ok()) << layout.status();
  Node nodes[2];
  std::string addresses[2];
  std::unique_ptr<GroupRouter> routers[2];
  for (int n = 0; n < 2; ++n) {
    ASSERT_NO_FATAL_FAILURE(ForwarderTest::OpenStore(&nodes[n]));
    GroupRouter::Options options;
    options.layout = *layout;
    options.hosted[n] = nodes[n].store.get();
    // The other group's leader, known once both nodes listen.
    options.not_hosted = [&addresses](uint32_t group) {
      absl::Status s = absl::UnavailableError("group not hosted here");
      s.SetPayload(kLeaderAddressPayload, absl::Cord(addresses[group]));
      return s;
    };
    absl::StatusOr<std::unique_ptr<GroupRouter>> router =
        GroupRouter::Create(std::move(options));
    ASSERT_TRUE(router.ok()) << router.status();
    routers[n] = *std::move(router);
  }
  for (int n = 0; n < 2; ++n) {
    nodes[n].split = std::make_unique<SplitStore>(routers[n].get(), "");
    ASSERT_NO_FATAL_FAILURE(ForwarderTest::Serve(&nodes[n], true));
    addresses[n] = nodes[n].address;
  }
  for (int via = 0; via < 2; ++via) {
    v1::BeginBatchRequest begins;
    int in_group[2] = {0, 0};
    for (int i = 0; i < 40; ++i) {
      *begins.add_items() =
          ForwarderTest::BeginOf(absl::StrCat("via-", via, "-key-", i));
      ++in_group[routers[0]->GroupOf("ns", begins.items(i).key())];
    }
    ASSERT_GT(in_group[0], 0);
    ASSERT_GT(in_group[1], 0);
    grpc::ClientContext context;
    Deadline(&context);
    v1::BeginBatchResponse begun;
    grpc::Status s = v1::Dedup::NewStub(grpc::CreateChannel(
                                            nodes[via].address,
                                            grpc::InsecureChannelCredentials()))
                         ->BeginBatch(&context, begins, &begun);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(begun.items_size(), 40);
    for (int i = 0; i < 40; ++i) {
      const std::string& key = begins.items(i).key();
      const uint32_t group = routers[0]->GroupOf("ns", key);
      ASSERT_TRUE(begun.items(i).has_response())
          << key << ": " << begun.items(i).error().message();
      EXPECT_EQ(begun.items(i).response().status(), v1::BeginResponse::STARTED);
      EXPECT_TRUE(ForwarderTest::Holds(nodes[group], key)) << key;
      EXPECT_FALSE(ForwarderTest::Holds(nodes[1 - group], key)) << key;
    }
  }
  for (Node& node : nodes) node.server->Shutdown();
}

// The leader's ABORTED + dedup-outcome: unknown reaches the caller as is,
// alone or as a batch item's error.
TEST_F(ForwarderTest, TheLeadersUnknownOutcomeIsRelayedAsIs) {
  grpc::ClientContext context;
  Deadline(&context);
  v1::BeginResponse response;
  grpc::Status s =
      Stub(node_)->Begin(&context, BeginOf("remote-unknown"), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED) << s.error_message();
  EXPECT_EQ(Trailer(context, "dedup-outcome"), "unknown");
  EXPECT_EQ(Trailer(context, "dedup-leader"), leader_.address);

  v1::BeginBatchRequest begins;
  *begins.add_items() = BeginOf("remote-unknown-b");
  *begins.add_items() = BeginOf("local-b");
  grpc::ClientContext batch_context;
  Deadline(&batch_context);
  v1::BeginBatchResponse begun;
  s = Stub(node_)->BeginBatch(&batch_context, begins, &begun);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(begun.items_size(), 2);
  EXPECT_EQ(begun.items(0).error().code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(begun.items(1).response().status(), v1::BeginResponse::STARTED);
}

// A call marked forwarded is answered with the refusal, not sent on.
TEST_F(ForwarderTest, AForwardedCallIsAnsweredWithTheHint) {
  grpc::ClientContext context;
  Deadline(&context);
  context.AddMetadata("dedup-forwarded", "1");
  v1::BeginResponse response;
  grpc::Status s = Stub(node_)->Begin(&context, BeginOf("remote-f"), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Trailer(context, "dedup-leader"), leader_.address);
  EXPECT_FALSE(Holds(leader_, "remote-f"));
}

// Leadership moved while a call was forwarded: the leader the node knew
// (`leader_`) refuses "moved" keys naming the new one (`moved_`), which
// serves them but refuses "twice" keys naming yet another node, where
// nothing listens. `follower_` leads nothing and forwards whole calls.
class ResendTest : public ForwarderTest {
 public:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Start(&moved_, "", kNowhere, "twice"));
    ASSERT_NO_FATAL_FAILURE(Start(&leader_, "", moved_.address));
    ASSERT_NO_FATAL_FAILURE(Start(&node_, leader_.address));
    ASSERT_NO_FATAL_FAILURE(Start(&follower_, leader_.address, "", "",
                                  /*not_serving=*/true));
  }

  static constexpr char kNowhere[] = "127.0.0.1:1";
  Node moved_;
  Node follower_;
};

TEST_F(ResendTest, ACallRefusedNamingTheNewLeaderGoesThereOnce) {
  grpc::ClientContext context;
  Deadline(&context);
  v1::BeginResponse begun;
  grpc::Status s =
      Stub(node_)->Begin(&context, BeginOf("remote-moved-u"), &begun);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(begun.status(), v1::BeginResponse::STARTED);
  EXPECT_EQ(Trailer(context, "dedup-leader"), moved_.address);
  EXPECT_TRUE(Holds(moved_, "remote-moved-u"));
  EXPECT_FALSE(Holds(leader_, "remote-moved-u"));
}

TEST_F(ResendTest, BatchItemsRefusedNamingTheNewLeaderGoThereOnce) {
  v1::BeginBatchRequest begins;
  for (const char* key : {"local-0", "remote-moved-1", "remote-2"}) {
    *begins.add_items() = BeginOf(key);
  }
  grpc::ClientContext context;
  Deadline(&context);
  v1::BeginBatchResponse begun;
  grpc::Status s = Stub(node_)->BeginBatch(&context, begins, &begun);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(begun.items_size(), 3);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(begun.items(i).has_response())
        << i << ": " << begun.items(i).error().message();
    EXPECT_EQ(begun.items(i).response().status(), v1::BeginResponse::STARTED);
  }
  EXPECT_TRUE(Holds(node_, "local-0"));
  EXPECT_TRUE(Holds(moved_, "remote-moved-1"));
  EXPECT_TRUE(Holds(leader_, "remote-2"));
}

// The new leader named in ItemError.leader only (the message names none)
// is followed as well.
TEST_F(ResendTest, BatchItemsNamingTheLeaderInTheFieldOnlyGoThere) {
  v1::BeginBatchRequest begins;
  *begins.add_items() = BeginOf("remote-quietmoved-1");
  *begins.add_items() = BeginOf("local-quietmoved-2");
  grpc::ClientContext context;
  Deadline(&context);
  v1::BeginBatchResponse begun;
  grpc::Status s = Stub(node_)->BeginBatch(&context, begins, &begun);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(begun.items_size(), 2);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(begun.items(i).has_response())
        << i << ": " << begun.items(i).error().message();
  }
  EXPECT_TRUE(Holds(moved_, "remote-quietmoved-1"));
  EXPECT_FALSE(Holds(leader_, "remote-quietmoved-1"));
  EXPECT_TRUE(Holds(node_, "local-quietmoved-2"));
}

// A whole batch forwarded as one call (a node that leads none of it): its
// items refused naming the new leader go there.
TEST_F(ResendTest, ItemsOfAWholeForwardedBatchGoToTheNewLeader) {
  v1::BeginBatchRequest begins;
  *begins.add_items() = BeginOf("remote-moved-w");
  *begins.add_items() = BeginOf("remote-w");
  grpc::ClientContext context;
  Deadline(&context);
  v1::BeginBatchResponse begun;
  grpc::Status s = Stub(follower_)->BeginBatch(&context, begins, &begun);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(begun.items_size(), 2);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(begun.items(i).has_response())
        << i << ": " << begun.items(i).error().message();
    EXPECT_EQ(begun.items(i).response().status(), v1::BeginResponse::STARTED);
  }
  EXPECT_EQ(Trailer(context, "dedup-leader"), leader_.address);
  EXPECT_TRUE(Holds(moved_, "remote-moved-w"));
  EXPECT_TRUE(Holds(leader_, "remote-w"));
}

TEST_F(ResendTest, ASecondRefusalIsTheAnswer) {
  grpc::ClientContext context;
  Deadline(&context);
  v1::BeginResponse begun;
  grpc::Status s =
      Stub(node_)->Begin(&context, BeginOf("remote-moved-twice"), &begun);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  // moved_'s refusal (relayed, not followed).
  EXPECT_EQ(Trailer(context, "dedup-leader"), kNowhere);
  EXPECT_FALSE(Holds(leader_, "remote-moved-twice"));
  EXPECT_FALSE(Holds(moved_, "remote-moved-twice"));
}

TEST(LeaderAddressInMessageTest, ReadsTheRefusalsThatNameALeader) {
  MemberDirectory members({{3, "10.0.0.3:7000", "node3.example:7001"}});
  members.Reload({});
  EXPECT_EQ(LeaderAddressInMessage(members.NotLeader(3).message()),
            "node3.example:7001");
  EXPECT_EQ(LeaderAddressInMessage(
                "node 1 hosts no replica of group 4; its leader is likely "
                "node 2 at 127.0.0.2:7001"),
            "127.0.0.2:7001");
  EXPECT_EQ(LeaderAddressInMessage(members.NotLeader(0).message()), "");
  EXPECT_EQ(LeaderAddressInMessage("store is closed"), "");
}

}  // namespace
}  // namespace forwarder_test
}  // namespace dedup
