// A 3-node dedupd group on loopback (127.0.0.1-3) for tests: real processes,
// temp data dirs, free ports; nodes killed, restarted and stopped by PID.
#ifndef DEDUP_TESTS_CLUSTER_CLUSTER_HARNESS_H_
#define DEDUP_TESTS_CLUSTER_CLUSTER_HARNESS_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dedup/v1/cluster.grpc.pb.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "tests/testing/server_process.h"

namespace dedup::testing {

class ClusterHarness {
 public:
  // Picks ports and data dirs; starts nothing. `extra_flags` go to every
  // node.
  explicit ClusterHarness(int nodes = 3,
                          std::vector<std::string> extra_flags = {});
  ~ClusterHarness();

  [[nodiscard]] absl::Status StartAll();
  // Node ids are 1..n; index i is node i+1.
  [[nodiscard]] absl::Status Start(int id);
  // Starts node `id` with `more_flags` after its usual ones (this start
  // only).
  [[nodiscard]] absl::Status Start(int id, std::vector<std::string> more_flags);
  void Kill(int id);
  [[nodiscard]] absl::Status Stop(int id);
  bool running(int id) const { return nodes_[id - 1].process != nullptr; }

  const std::string& client_address(int id) const {
    return nodes_[id - 1].client_address;
  }
  const std::string& raft_address(int id) const {
    return nodes_[id - 1].raft_address;
  }
  const std::string& data_dir(int id) const { return nodes_[id - 1].data_dir; }

  // Makes room for one more node (id size()+1, on 127.0.0.<id>) that starts
  // with --join: it serves once the group adds it (Cluster.AddNode).
  // Returns its id.
  int AddJoiner();
  ServerProcess* process(int id) { return nodes_[id - 1].process.get(); }
  int size() const { return static_cast<int>(nodes_.size()); }

  // Waits until a running node reports itself leader; returns its id.
  [[nodiscard]] absl::StatusOr<int> WaitForLeader(
      std::chrono::milliseconds timeout = std::chrono::seconds(15));
  [[nodiscard]] absl::StatusOr<v1::ClusterStatusResponse> Status(int id);
  [[nodiscard]] absl::StatusOr<v1::DigestResponse> Digest(int id);
  // Waits until every running node has applied the same index and returns
  // their digests (in id order).
  [[nodiscard]] absl::StatusOr<std::vector<v1::DigestResponse>>
  ConvergedDigests(
      std::chrono::milliseconds timeout = std::chrono::seconds(20));

  std::unique_ptr<v1::Dedup::Stub> DedupStub(int id) const;

 private:
  struct Node {
    std::string client_address;
    std::string raft_address;
    std::string data_dir;
    std::unique_ptr<ServerProcess> process;
    bool joins = false;
  };
  std::vector<std::string> FlagsOf(int id) const;

  std::string root_;
  std::string peers_;
  std::vector<std::string> extra_flags_;
  std::vector<Node> nodes_;
};

}  // namespace dedup::testing

#endif  // DEDUP_TESTS_CLUSTER_CLUSTER_HARNESS_H_
