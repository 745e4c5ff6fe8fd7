// Any node answers: a follower forwards each dedup.v1.Dedup call one hop to
// the leader and relays its answer with "dedup-leader" (server/forwarder.h),
// never a call forwarded already, within the caller's deadline, with the
// caller's own credentials; --forward_to_leader=false keeps the follower's
// UNAVAILABLE.
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/testing/http_get.h"

namespace dedup {
namespace {

void Deadline(grpc::ClientContext* context, int ms = 5000) {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(ms));
}

class ForwardTest : public ClusterTest {
 protected:
  ForwardTest() : ClusterTest({"--metrics_address=127.0.0.1:0"}) {}

  void SetUp() override {
    ClusterTest::SetUp();
    for (int id = 1; id <= 3; ++id) {
      if (id != leader_) followers_.push_back(id);
    }
    // A follower forwards once it has heard from the leader.
    for (int id : followers_) {
      std::string hint;
      for (int i = 0; i < 100 && hint != cluster_.client_address(leader_);
           ++i) {
        if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        grpc::ClientContext context;
        Deadline(&context);
        context.AddMetadata("dedup-forwarded", "test");
        v1::GetRequest get;
        get.set_namespace_("cluster");
        get.set_key("k");
        v1::GetResponse response;
        (void)cluster_.DedupStub(id)->Get(&context, get, &response);
        hint = LeaderHint(context);
      }
      ASSERT_EQ(hint, cluster_.client_address(leader_)) << "node " << id;
    }
  }

  // Sends one call straight to node `id` (no redirect followed) and checks
  // that the answer names the leader.
  template <typename Request, typename Response, typename Method>
  grpc::Status At(int id, Method method, const Request& request,
                  Response* response) {
    grpc::ClientContext context;
    Deadline(&context);
    grpc::Status s =
        ((*cluster_.DedupStub(id)).*method)(&context, request, response);
    EXPECT_EQ(LeaderHint(context), cluster_.client_address(leader_))
        << "via node " << id;
    return s;
  }

  double Forwarded(int id, const std::string& result) {
    absl::StatusOr<double> v = testing::ScrapeSample(
        cluster_.process(id)->metrics_port(),
        absl::StrCat("dedup_forwarded_calls_total{result=\"", result, "\"}"));
    return v.ok() ? *v : -1;
  }

  std::vector<int> followers_;
};

TEST_F(ForwardTest, EveryCallThroughAFollowerAnswersAsTheLeader) {
  const int a = followers_[0], b = followers_[1];
  v1::BeginResponse begun;
  ASSERT_TRUE(At(a, &v1::Dedup::Stub::Begin, BeginOf("k", "w"), &begun).ok());
  ASSERT_EQ(begun.status(), v1::BeginResponse::STARTED);

  v1::RenewRequest renew;
  renew.set_namespace_("cluster");
  renew.set_key("k");
  renew.set_fence(begun.fence());
  v1::RenewResponse renewed;
  ASSERT_TRUE(At(b, &v1::Dedup::Stub::Renew, renew, &renewed).ok());
  EXPECT_EQ(renewed.status(), v1::RenewResponse::OK);

  v1::CheckpointRequest checkpoint;
  checkpoint.set_namespace_("cluster");
  checkpoint.set_key("k");
  checkpoint.set_fence(begun.fence());
  checkpoint.set_step("step-1");
  v1::CheckpointResponse checkpointed;
  ASSERT_TRUE(
      At(a, &v1::Dedup::Stub::Checkpoint, checkpoint, &checkpointed).ok());
  EXPECT_EQ(checkpointed.status(), v1::CheckpointResponse::OK);

  v1::CompleteRequest complete;
  complete.set_namespace_("cluster");
  complete.set_key("k");
  complete.set_fence(begun.fence());
  complete.set_outcome(v1::SUCCESS);
  complete.set_result("the result");
  v1::CompleteResponse completed;
  ASSERT_TRUE(At(b, &v1::Dedup::Stub::Complete, complete, &completed).ok());
  EXPECT_EQ(completed.status(), v1::CompleteResponse::OK);

  // The third node, the leader, and both followers: DUPLICATE.
  for (int id : {leader_, a, b}) {
    v1::BeginResponse again;
    grpc::ClientContext context;
    Deadline(&context);
    ASSERT_TRUE(cluster_.DedupStub(id)
                    ->Begin(&context, BeginOf("k", "other"), &again)
                    .ok());
    EXPECT_EQ(again.status(), v1::BeginResponse::DUPLICATE) << id;
    EXPECT_EQ(again.result(), "the result") << id;
  }

  v1::GetRequest get;
  get.set_namespace_("cluster");
  get.set_key("k");
  v1::GetResponse got;
  ASSERT_TRUE(At(a, &v1::Dedup::Stub::Get, get, &got).ok());
  EXPECT_TRUE(got.found());
  EXPECT_EQ(got.record().result(), "the result");

  v1::ForgetRequest forget;
  forget.set_namespace_("cluster");
  forget.set_key("k");
  v1::ForgetResponse forgot;
  ASSERT_TRUE(At(b, &v1::Dedup::Stub::Forget, forget, &forgot).ok());
  EXPECT_TRUE(forgot.existed());

  v1::BeginResponse fresh;
  ASSERT_TRUE(At(a, &v1::Dedup::Stub::Begin, BeginOf("r", "w"), &fresh).ok());
  v1::ReleaseRequest release;
  release.set_namespace_("cluster");
  release.set_key("r");
  release.set_fence(fresh.fence());
  v1::ReleaseResponse released;
  ASSERT_TRUE(At(b, &v1::Dedup::Stub::Release, release, &released).ok());
  EXPECT_EQ(released.status(), v1::ReleaseResponse::OK);

  // Each follower counted what it forwarded (5 calls each, DUPLICATEs
  // included); the leader forwarded nothing.
  EXPECT_EQ(Forwarded(a, "ok"), 5);
  EXPECT_EQ(Forwarded(b, "ok"), 5);
  EXPECT_EQ(Forwarded(leader_, "ok"), 0);
}

TEST_F(ForwardTest, AForwardedCallIsNeverForwardedAgain) {
  grpc::ClientContext context;
  Deadline(&context);
  context.AddMetadata("dedup-forwarded", "7");
  v1::BeginResponse response;
  const grpc::Status s = cluster_.DedupStub(followers_[0])
                             ->Begin(&context, BeginOf("loop", "o"), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("not the leader"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(LeaderHint(context), cluster_.client_address(leader_));
  EXPECT_EQ(Forwarded(followers_[0], "ok"), 0);
}

// A Begin parked on a held key through a follower ends with the caller's
// deadline, on the leader as well: the forwarded call does not outlive it.
TEST_F(ForwardTest, TheCallersDeadlineHolds) {
  v1::BeginResponse held;
  ASSERT_TRUE(Call(cluster_.client_address(leader_), &v1::Dedup::Stub::Begin,
                   BeginOf("held", "holder"), &held)
                  .ok());
  ASSERT_EQ(held.status(), v1::BeginResponse::STARTED);
  v1::BeginRequest waiting = BeginOf("held", "waiter");
  waiting.set_wait_ms(20'000);
  grpc::ClientContext context;
  Deadline(&context, 600);
  v1::BeginResponse response;
  const auto start = std::chrono::steady_clock::now();
  const grpc::Status s =
      cluster_.DedupStub(followers_[0])->Begin(&context, waiting, &response);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::milliseconds(1500));
  // At the deadline, or the leader's IN_USE just before it.
  if (s.ok()) {
    EXPECT_EQ(response.status(), v1::BeginResponse::IN_USE);
  } else {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << s.error_message();
  }
  // The forwarded call ended too, long before the 20 s it asked to wait,
  // by the deadline it carried (the leader's IN_USE just before it, or the
  // deadline itself): not cancelled as a call that knew no deadline is.
  double ended = -1;
  for (int i = 0; i < 20 && ended < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ended = Forwarded(followers_[0], "deadline_exceeded") +
            Forwarded(followers_[0], "ok");
  }
  EXPECT_EQ(ended, 1);
  EXPECT_EQ(Forwarded(followers_[0], "cancelled"), 0);
}

// A caller that cancels its call through a follower cancels the forwarded
// one: it does not stay parked on the leader for its wait_ms.
TEST_F(ForwardTest, TheCallersCancellationReachesTheLeader) {
  v1::BeginResponse held;
  ASSERT_TRUE(Call(cluster_.client_address(leader_), &v1::Dedup::Stub::Begin,
                   BeginOf("held-c", "holder"), &held)
                  .ok());
  v1::BeginRequest waiting = BeginOf("held-c", "waiter");
  waiting.set_wait_ms(20'000);
  grpc::ClientContext context;
  Deadline(&context, 30'000);
  std::thread cancel([&context] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    context.TryCancel();
  });
  v1::BeginResponse response;
  const grpc::Status s =
      cluster_.DedupStub(followers_[0])->Begin(&context, waiting, &response);
  cancel.join();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED) << s.error_message();
  double cancelled = -1;
  for (int i = 0; i < 20 && cancelled < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cancelled = Forwarded(followers_[0], "cancelled");
  }
  EXPECT_EQ(cancelled, 1);
}

TEST_F(ForwardTest, BatchesThroughAFollowerAnswerEveryItem) {
  const int a = followers_[0], b = followers_[1];
  v1::BeginBatchRequest begins;
  for (int i = 0; i < 5; ++i) {
    *begins.add_items() = BeginOf(absl::StrCat("batch-", i), "w");
  }
  v1::BeginBatchResponse begun;
  ASSERT_TRUE(At(a, &v1::Dedup::Stub::BeginBatch, begins, &begun).ok());
  ASSERT_EQ(begun.items_size(), 5);
  v1::CheckpointBatchRequest checkpoints;
  v1::CompleteBatchRequest completes;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(begun.items(i).has_response()) << i;
    EXPECT_EQ(begun.items(i).response().status(), v1::BeginResponse::STARTED);
    v1::CheckpointRequest* c = checkpoints.add_items();
    c->set_namespace_("cluster");
    c->set_key(begins.items(i).key());
    c->set_fence(begun.items(i).response().fence());
    c->set_step("s");
    v1::CompleteRequest* d = completes.add_items();
    d->set_namespace_("cluster");
    d->set_key(begins.items(i).key());
    d->set_fence(begun.items(i).response().fence());
    d->set_outcome(v1::SUCCESS);
    d->set_result(absl::StrCat("result-", i));
  }
  v1::CheckpointBatchResponse checkpointed;
  ASSERT_TRUE(
      At(b, &v1::Dedup::Stub::CheckpointBatch, checkpoints, &checkpointed)
          .ok());
  ASSERT_EQ(checkpointed.items_size(), 5);
  for (const auto& item : checkpointed.items()) {
    EXPECT_EQ(item.response().status(), v1::CheckpointResponse::OK);
  }
  v1::CompleteBatchResponse completed;
  ASSERT_TRUE(
      At(b, &v1::Dedup::Stub::CompleteBatch, completes, &completed).ok());
  ASSERT_EQ(completed.items_size(), 5);
  for (const auto& item : completed.items()) {
    EXPECT_EQ(item.response().status(), v1::CompleteResponse::OK);
  }
  std::map<std::string, std::pair<uint64_t, std::string>> keys;
  for (int i = 0; i < 5; ++i) {
    keys[begins.items(i).key()] = {begun.items(i).response().fence(),
                                   absl::StrCat("result-", i)};
  }
  ExpectDuplicates(a, keys);
}

class NoForwardTest : public ClusterTest {
 protected:
  NoForwardTest() : ClusterTest({"--forward_to_leader=false"}) {}
};

TEST_F(NoForwardTest, AFollowerNamesTheLeader) {
  const int follower = leader_ == 1 ? 2 : 1;
  std::string hint;
  // Until the follower has heard from the leader, it names nobody.
  for (int i = 0; i < 100 && hint.empty(); ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    grpc::ClientContext context;
    Deadline(&context);
    v1::GetRequest get;
    get.set_namespace_("cluster");
    get.set_key("k");
    v1::GetResponse response;
    const grpc::Status s =
        cluster_.DedupStub(follower)->Get(&context, get, &response);
    ASSERT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE)
        << s.error_message();
    hint = LeaderHint(context);
  }
  EXPECT_EQ(hint, cluster_.client_address(leader_));
}

}  // namespace
}  // namespace dedup
