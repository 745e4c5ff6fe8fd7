#include "tests/cluster/cluster_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace dedup::testing {
namespace {

template <typename Service>
std::unique_ptr<typename Service::Stub> StubFor(const std::string& address) {
  return Service::NewStub(TestChannel(address));
}

}  // namespace

ClusterHarness::ClusterHarness(int n, std::vector<std::string> extra_flags)
    : extra_flags_(std::move(extra_flags)) {
  absl::StatusOr<std::string> root = MakeTempDir("dedup-cluster");
  root_ = root.ok() ? *root : "/tmp/dedup-cluster-failed";
  std::vector<std::string> peers;
  for (int id = 1; id <= n; ++id) {
    const std::string ip = absl::StrCat("127.0.0.", id);
    Node node;
    node.client_address = absl::StrCat(ip, ":", FreePort(ip));
    node.raft_address = absl::StrCat(ip, ":", FreePort(ip));
    node.data_dir = absl::StrCat(root_, "/n", id);
    peers.push_back(
        absl::StrCat(id, "=", node.raft_address, "=", node.client_address));
    nodes_.push_back(std::move(node));
  }
  peers_ = absl::StrJoin(peers, ",");
}

ClusterHarness::~ClusterHarness() {
  for (Node& node : nodes_) node.process.reset();
  std::error_code ec;
  std::filesystem::remove_all(root_, ec);
}

int ClusterHarness::AddJoiner() {
  const int id = size() + 1;
  const std::string ip = absl::StrCat("127.0.0.", id);
  Node node;
  node.client_address = absl::StrCat(ip, ":", FreePort(ip));
  node.raft_address = absl::StrCat(ip, ":", FreePort(ip));
  node.data_dir = absl::StrCat(root_, "/n", id);
  node.joins = true;
  nodes_.push_back(std::move(node));
  return id;
}

std::vector<std::string> ClusterHarness::FlagsOf(int id) const {
  std::vector<std::string> flags = {
      absl::StrCat("--node_id=", id), absl::StrCat("--peers=", peers_),
      absl::StrCat("--address=", client_address(id)), "--event_log=off"};
  if (nodes_[id - 1].joins) {
    flags.push_back("--join");
    flags.push_back(absl::StrCat("--raft_address=", raft_address(id)));
  }
  flags.insert(flags.end(), extra_flags_.begin(), extra_flags_.end());
  return flags;
}

absl::Status ClusterHarness::Start(int id) { return Start(id, {}); }

absl::Status ClusterHarness::Start(int id,
                                   std::vector<std::string> more_flags) {
  Node& node = nodes_[id - 1];
  node.process.reset();
  std::vector<std::string> flags = FlagsOf(id);
  flags.insert(flags.end(), more_flags.begin(), more_flags.end());
  absl::StatusOr<std::unique_ptr<ServerProcess>> started =
      ServerProcess::Start(std::move(flags), node.data_dir);
  if (!started.ok()) return started.status();
  node.process = *std::move(started);
  return absl::OkStatus();
}

absl::Status ClusterHarness::StartAll() {
  for (int id = 1; id <= size(); ++id) {
    if (absl::Status s = Start(id); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void ClusterHarness::Kill(int id) {
  Node& node = nodes_[id - 1];
  if (node.process == nullptr) return;
  node.process->Kill();
  node.process.reset();
}

absl::Status ClusterHarness::Stop(int id) {
  Node& node = nodes_[id - 1];
  if (node.process == nullptr) return absl::OkStatus();
  absl::Status s = node.process->Stop();
  node.process.reset();
  return s;
}

absl::StatusOr<v1::ClusterStatusResponse> ClusterHarness::Status(int id) {
  auto stub = StubFor<v1::Cluster>(client_address(id));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(2));
  v1::ClusterStatusResponse response;
  grpc::Status s =
      stub->Status(&context, v1::ClusterStatusRequest(), &response);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("node ", id, " status: ", s.error_message()));
  }
  return response;
}

absl::StatusOr<v1::DigestResponse> ClusterHarness::Digest(int id) {
  auto stub = StubFor<v1::Cluster>(client_address(id));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  v1::DigestResponse response;
  grpc::Status s = stub->Digest(&context, v1::DigestRequest(), &response);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("node ", id, " digest: ", s.error_message()));
  }
  return response;
}

absl::StatusOr<int> ClusterHarness::WaitForLeader(
    std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    for (int id = 1; id <= size(); ++id) {
      if (!running(id)) continue;
      absl::StatusOr<v1::ClusterStatusResponse> status = Status(id);
      if (status.ok() && status->role() == "leader") return id;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError("no leader elected");
}

absl::StatusOr<std::vector<v1::DigestResponse>>
ClusterHarness::ConvergedDigests(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<v1::DigestResponse> digests;
  while (std::chrono::steady_clock::now() < deadline) {
    digests.clear();
    bool same_index = true;
    for (int id = 1; id <= size(); ++id) {
      if (!running(id)) continue;
      absl::StatusOr<v1::DigestResponse> d = Digest(id);
      if (!d.ok()) return d.status();
      if (!digests.empty() &&
          d->applied_index() != digests.front().applied_index()) {
        same_index = false;
      }
      digests.push_back(*std::move(d));
    }
    if (same_index) return digests;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::DeadlineExceededError("replicas did not reach one index");
}

std::unique_ptr<v1::Dedup::Stub> ClusterHarness::DedupStub(int id) const {
  return StubFor<v1::Dedup>(client_address(id));
}

}  // namespace dedup::testing
