// LeaseKeeper: renews the lease of a claim in the background while its
// owner's side effect runs, and notices when the claim is lost.
//
// Every `interval` it sends Renew(fence); an answer of STALE_FENCE (someone
// took over), NOT_FOUND (the record is gone) or ALREADY_COMPLETED marks the
// claim lost and stops renewing. A Renew that fails (UNAVAILABLE after the
// client's retries, a deadline) is not a loss: the next one goes an interval
// later, and the lease itself says how long that may go on.
//
// Thread safety: lost() and Stop() may be called from any thread. Owns one
// thread, joined by Stop() or the destructor.
#ifndef DEDUP_CLIENT_LEASE_KEEPER_H_
#define DEDUP_CLIENT_LEASE_KEEPER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/dedup_client.h"

namespace dedup {

class LeaseKeeper {
 public:
  // `client` is not owned and must outlive this object. `lease_ms` is sent
  // with each Renew (0: the server default).
  LeaseKeeper(const Client& client, std::string ns, std::string key,
              uint64_t fence, uint32_t lease_ms, absl::Duration interval);
  ~LeaseKeeper();

  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Stops renewing; returns once no Renew is in flight.
  void Stop();
  // A renewal learnt the claim is lost.
  [[nodiscard]] bool lost() const { return lost_.load(); }
  // Renewals answered OK so far.
  [[nodiscard]] int renewals() const { return renewals_.load(); }

 private:
  void Run();

  const Client& client_;
  const std::string ns_;
  const std::string key_;
  const uint64_t fence_;
  const uint32_t lease_ms_;
  const absl::Duration interval_;
  std::atomic<bool> lost_{false};
  std::atomic<int> renewals_{0};
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dedup

#endif  // DEDUP_CLIENT_LEASE_KEEPER_H_
