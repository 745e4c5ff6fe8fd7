// A Store (or a subclass interface, e.g. ReplicatedStore) whose operations
// do nothing and answer nobody: a base for test fakes that care about one or
// two methods. Not thread-safe beyond what the subclass adds.
#ifndef DEDUP_TESTS_UNIT_INERT_STORE_H_
#define DEDUP_TESTS_UNIT_INERT_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "storage/store.h"

namespace dedup::testing {

template <typename Base>
class InertStoreOf : public Base {
 public:
  void Begin(std::string, std::string, BeginParams, int64_t,
             StoreCallback<BeginResult>) override {}
  void Complete(std::string, std::string, CompleteParams,
                StoreCallback<FencedDecision>) override {}
  void Release(std::string, std::string, uint64_t,
               StoreCallback<FencedDecision>) override {}
  void Renew(std::string, std::string, uint64_t, int64_t,
             StoreCallback<FencedDecision>) override {}
  void Checkpoint(std::string, std::string, CheckpointParams,
                  StoreCallback<FencedDecision>) override {}
  void BeginMany(std::vector<typename Base::BeginCall>) override {}
  void CompleteMany(std::vector<typename Base::CompleteCall>) override {}
  void Get(std::string, std::string,
           StoreCallback<std::optional<Record>>) override {}
  void Forget(std::string, std::string, StoreCallback<bool>) override {}
  void DrainWaiters() override {}
  absl::Status Close() override { return absl::OkStatus(); }
  absl::Status CompactAll() override { return absl::OkStatus(); }
  StoreStats Stats() override { return StoreStats(); }
  absl::StatusOr<uint64_t> CountStoredRecords() override { return 0; }
};

}  // namespace dedup::testing

#endif  // DEDUP_TESTS_UNIT_INERT_STORE_H_
