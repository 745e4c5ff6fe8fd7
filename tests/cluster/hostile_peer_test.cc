// The messages that once crashed a node or froze its group for good
// (issue 27), sent to every node's Raft port of a plaintext loopback group:
// without the hello, and behind a valid hello as a member. Each connection
// is closed, and the group keeps its nodes, its leader and a sane term.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "replication/peer_hello.h"
#include "tests/cluster/cluster_fixture.h"

namespace dedup {
namespace {

void PutU64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(value >> 8 * i));
}

std::string Message(uint64_t type, std::initializer_list<uint64_t> header) {
  std::string out;
  PutU64(out, type);
  PutU64(out, header.size() * 8);
  for (uint64_t field : header) PutU64(out, field);
  return out;
}

constexpr uint64_t kMax = ~uint64_t{0};
// AppendEntries saying 2^32-1 entries follow: libraft 0.15 read past its
// buffer (SIGSEGV).
const std::string kHugeCount = Message(1, {1, 0, 0, 0, 0xffffffffull});
// An AppendEntriesResult and a RequestVote with term 2^64-1: persisted,
// the group never elected again.
const std::string kMaxTermResult = Message(2, {kMax, 0, 0});
const std::string kMaxTermVote = Message(3, {kMax, 2, 0, 0, 0});

// raft_uv_tcp's own handshake: protocol 1, server id 2, address.
std::string UvTcpHandshake(const std::string& address) {
  std::string out;
  PutU64(out, 1);
  PutU64(out, 2);
  PutU64(out, 16);
  std::string padded = address;
  padded.resize(16, '\0');
  return out + padded;
}

std::string MemberHello(const std::string& address) {
  PeerHello hello;
  hello.node_id = 2;
  hello.address = address;
  return EncodePeerHello(hello);
}

// Sends `hello` (when not empty: then waits for its answer, which must be
// 0) and `bytes` to `raft_address`; reports whether the node closed the
// connection within 3 s.
bool ClosedAfterSending(const std::string& raft_address,
                        const std::string& hello, const std::string& bytes) {
  const size_t colon = raft_address.rfind(':');
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(std::stoi(raft_address.substr(colon + 1)));
  inet_pton(AF_INET, raft_address.substr(0, colon).c_str(), &to.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return false;
  }
  if (!hello.empty()) {
    char status = -1;
    (void)send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
    EXPECT_EQ(recv(fd, &status, 1, MSG_WAITALL), 1);
    EXPECT_EQ(status, 0) << "hello refused by " << raft_address;
  }
  (void)send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  bool closed = false;
  while (!closed && std::chrono::steady_clock::now() < until) {
    struct pollfd p {};
    p.fd = fd;
    p.events = POLLIN;
    if (poll(&p, 1, 100) != 1) continue;
    char buf[64];
    closed = recv(fd, buf, sizeof(buf), 0) <= 0;
  }
  close(fd);
  return closed;
}

using HostilePeerTest = ClusterTest;

TEST_F(HostilePeerTest, BadFramesCloseTheConnectionAndHarmNoNode) {
  for (int id = 1; id <= 3; ++id) {
    const std::string& raft = cluster_.raft_address(id);
    const std::string self = cluster_.raft_address(id == 2 ? 1 : 2);
    for (const std::string* message :
         {&kHugeCount, &kMaxTermResult, &kMaxTermVote}) {
      EXPECT_TRUE(ClosedAfterSending(raft, "", UvTcpHandshake(self) + *message))
          << "node " << id;
      EXPECT_TRUE(ClosedAfterSending(raft, MemberHello(self), *message))
          << "node " << id;
    }
  }
  // Long enough for a crash to show and for an election to be seen.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (int id = 1; id <= 3; ++id) {
    EXPECT_FALSE(
        cluster_.process(id)->WaitForExit(std::chrono::milliseconds(0)))
        << "node " << id
        << " exited: " << cluster_.process(id)->captured_stderr();
  }
  absl::StatusOr<int> leader = cluster_.WaitForLeader();
  ASSERT_TRUE(leader.ok()) << leader.status();
  for (int id = 1; id <= 3; ++id) {
    absl::StatusOr<v1::ClusterStatusResponse> status = cluster_.Status(id);
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_LT(status->term(), 1000u) << "node " << id;
  }
  const auto keys = BeginAndComplete(*leader, 50, "after-hostile");
  ExpectDuplicates(*leader, keys);
}

}  // namespace
}  // namespace dedup
