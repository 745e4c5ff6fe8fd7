// Blocking wrappers over the asynchronous Store API, for tests.
#ifndef DEDUP_TESTS_UNIT_STORE_TEST_UTIL_H_
#define DEDUP_TESTS_UNIT_STORE_TEST_UTIL_H_

#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "storage/store.h"

namespace dedup::testing {

// Calls `submit(callback)` and blocks until the callback runs.
template <typename T, typename Submit>
absl::StatusOr<T> Await(Submit submit) {
  absl::Notification done;
  absl::StatusOr<T> out = absl::UnknownError("callback never ran");
  submit([&](absl::StatusOr<T> result) {
    out = std::move(result);
    done.Notify();
  });
  done.WaitForNotification();
  return out;
}

inline BeginParams MakeBeginParams(std::string owner,
                                   std::string args_hash = "h",
                                   int64_t lease_ms = 10'000,
                                   uint32_t ttl_s = 3600) {
  BeginParams p;
  p.owner = std::move(owner);
  p.args_hash = std::move(args_hash);
  p.lease_ms = lease_ms;
  p.ttl_s = ttl_s;
  return p;
}

inline absl::StatusOr<BeginResult> BeginSync(Store& store,
                                             const std::string& key,
                                             BeginParams params,
                                             int64_t wait_ms = 0) {
  return Await<BeginResult>([&](StoreCallback<BeginResult> cb) {
    store.Begin("ns", key, std::move(params), wait_ms, std::move(cb));
  });
}

inline absl::StatusOr<FencedDecision> CompleteSync(
    Store& store, const std::string& key, uint64_t fence,
    const std::string& result, Outcome outcome = Outcome::kSuccess,
    uint32_t ttl_s = 0) {
  return Await<FencedDecision>([&](StoreCallback<FencedDecision> cb) {
    store.Complete("ns", key, CompleteParams{fence, outcome, result, ttl_s},
                   std::move(cb));
  });
}

inline absl::StatusOr<FencedDecision> ReleaseSync(Store& store,
                                                  const std::string& key,
                                                  uint64_t fence) {
  return Await<FencedDecision>([&](StoreCallback<FencedDecision> cb) {
    store.Release("ns", key, fence, std::move(cb));
  });
}

inline absl::StatusOr<std::optional<Record>> GetSync(Store& store,
                                                     const std::string& key) {
  return Await<std::optional<Record>>(
      [&](StoreCallback<std::optional<Record>> cb) {
        store.Get("ns", key, std::move(cb));
      });
}

}  // namespace dedup::testing

#endif  // DEDUP_TESTS_UNIT_STORE_TEST_UTIL_H_
