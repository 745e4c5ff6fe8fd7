#include "replication/replicated_store.h"

#include <filesystem>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "replication/replicated_store_impl.h"

namespace dedup {
namespace replicated_store_internal {

absl::Status ReplicatedStoreImpl::Start() {
  if (space_ != nullptr) space_->Start(nullptr, nullptr);
  if (!options_.consensus) {
    return absl::InvalidArgumentError("no consensus engine to start");
  }
  absl::StatusOr<std::unique_ptr<Consensus>> consensus =
      options_.consensus(this);
  if (!consensus.ok()) return consensus.status();
  consensus_ = *std::move(consensus);
  running_.store(true);
  return absl::OkStatus();
}

absl::Status ReplicatedStoreImpl::Close() {
  if (closed_.exchange(true)) return absl::OkStatus();
  draining_.store(true);
  if (space_ != nullptr) space_->Stop();
  if (consensus_ != nullptr) {
    consensus_->Post([this] {
      AnswerAllWaiters();
      FailQueued(absl::UnavailableError("store is closed"));
    });
    consensus_->Stop();
  }
  // After the engine: nothing asks for a fetch any more.
  if (prefetch_ != nullptr) prefetch_->Stop();
  // The consensus thread is gone: what it left unanswered is answered
  // here. A proposed entry may still commit elsewhere.
  for (auto& [sequence, ops] : proposed_) {
    tally_.UnknownOutcomes(ops.size());
    for (PendingOp& p : ops) {
      std::move(p).Fail(UnknownOutcome("the node stopped"));
    }
  }
  proposed_.clear();
  AnswerAllWaiters();
  FailQueued(absl::UnavailableError("store is closed"));
  return state_->Close();
}

void ReplicatedStoreImpl::AddMember(ClusterNode node, Done done) {
  auto add = [this, node](Done done) {
    OnLoop(std::move(done), [this, node](Done done) {
      return consensus_->AddMember(node.id, node.raft_address, std::move(done));
    });
  };
  if (node.client_address.empty()) {
    add(std::move(done));
    return;
  }
  // Every member learns the newcomer's client address first (through the
  // log), so any of them can name it once it leads.
  StoreCallback<bool> recorded =
      [add, done = std::make_shared<Done>(std::move(done))](
          absl::StatusOr<bool> recorded) mutable {
        if (!recorded.ok()) {
          std::move (*done)(recorded.status());
        } else {
          add(std::move(*done));
        }
      };
  Submit(PendingOp::Of(LogSetMember{node.id, node.client_address},
                       std::move(recorded)));
}

}  // namespace replicated_store_internal

absl::StatusOr<std::unique_ptr<ReplicatedStore>> ReplicatedStore::Open(
    ReplicatedStoreOptions options) {
  if (options.clock == nullptr) options.clock = RealClock();
  // Checkpoints being sent when the process stopped.
  std::error_code ec;
  std::filesystem::remove_all(options.state.path + ".outgoing", ec);
  absl::StatusOr<std::unique_ptr<ReplicatedState>> state =
      ReplicatedState::Open(options.state);
  if (!state.ok()) return state.status();
  auto store = std::make_unique<replicated_store_internal::ReplicatedStoreImpl>(
      std::move(options), *std::move(state));
  if (absl::Status s = store->Start(); !s.ok()) return s;
  return store;
}

}  // namespace dedup
