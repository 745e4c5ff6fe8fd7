// The messages that once crashed a node or froze its group for good
// (issue 27), sent to every node's Raft port of a plaintext loopback group:
// without the hello, and behind a valid hello as a member. Each connection
// is closed, and the group keeps its nodes, its leader and a sane term.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

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

// For each of libraft's six types (and type 7): a short header of 8 bytes of
// 0xff, headers of length 0 and 2^62, and a count field of 2^32-1 where
// AppendEntries keeps its count. None is a frame libraft 0.15 could send.
std::vector<std::string> MalformedOfEveryType() {
  std::vector<std::string> out;
  for (uint64_t type = 1; type <= 7; ++type) {
    out.push_back(Message(type, {kMax}));
    std::string zero;
    PutU64(zero, type);
    PutU64(zero, 0);
    out.push_back(zero);
    std::string huge;
    PutU64(huge, type);
    PutU64(huge, uint64_t{1} << 62);
    out.push_back(huge + std::string(64, '\0'));
    out.push_back(Message(type, {1, 0, 0, 0, 0xffffffffull, 0}));
  }
  return out;
}

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

int ConnectTo(const std::string& raft_address) {
  const size_t colon = raft_address.rfind(':');
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(std::stoi(raft_address.substr(colon + 1)));
  inet_pton(AF_INET, raft_address.substr(0, colon).c_str(), &to.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd >= 0 &&
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Every node's term, in id order.
std::vector<uint64_t> Terms(testing::ClusterHarness& cluster) {
  std::vector<uint64_t> terms;
  for (int id = 1; id <= cluster.size(); ++id) {
    absl::StatusOr<v1::ClusterStatusResponse> status = cluster.Status(id);
    EXPECT_TRUE(status.ok()) << status.status();
    terms.push_back(status.ok() ? status->term() : 0);
  }
  return terms;
}

using HostilePeerTest = ClusterTest;

TEST_F(HostilePeerTest, MalformedFramesOfEveryTypeChangeNoTerm) {
  const std::vector<uint64_t> before = Terms(cluster_);
  const std::vector<std::string> frames = MalformedOfEveryType();
  for (int id = 1; id <= 3; ++id) {
    const std::string& raft = cluster_.raft_address(id);
    const std::string self = cluster_.raft_address(id == 2 ? 1 : 2);
    for (const std::string& frame : frames) {
      // Without a hello (raft_uv_tcp's handshake instead), and as a member.
      EXPECT_TRUE(ClosedAfterSending(raft, "", UvTcpHandshake(self) + frame))
          << "node " << id;
      EXPECT_TRUE(ClosedAfterSending(raft, MemberHello(self), frame))
          << "node " << id;
    }
  }
  for (int id = 1; id <= 3; ++id) {
    EXPECT_FALSE(
        cluster_.process(id)->WaitForExit(std::chrono::milliseconds(0)))
        << "node " << id
        << " exited: " << cluster_.process(id)->captured_stderr();
  }
  // No node took a term from the frames. (An election of its own, under a
  // loaded machine, would raise a term by one or two, not more.)
  const std::vector<uint64_t> after = Terms(cluster_);
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_LE(after[i], before[i] + 2) << "node " << i + 1;
  }
  absl::StatusOr<int> leader = cluster_.WaitForLeader();
  ASSERT_TRUE(leader.ok()) << leader.status();
  const auto keys = BeginAndComplete(*leader, 50, "after-malformed");
  ExpectDuplicates(*leader, keys);
  ExpectIdenticalReplicas();
}

// A process that is not a member (node id 9) tries to join the
// conversation: a vote request that may disrupt the leader, a heartbeat of a
// later term, a leadership hand-over (TimeoutNow). Its hello is refused, the
// connection closed, and no node's term moves.
TEST_F(HostilePeerTest, StrangersCannotVoteAppendOrTransfer) {
  const std::vector<uint64_t> before = Terms(cluster_);
  const uint64_t term = before[leader_ - 1];
  const std::vector<std::string> attempts = {
      Message(3, {term + 1, 9, 1000000, term, 1}),  // RequestVote, disrupt
      Message(1, {term + 5, 0, 0, 1000000, 0, 0}),  // AppendEntries
      Message(6, {term, 1000000, term})};           // TimeoutNow
  PeerHello stranger;
  stranger.node_id = 9;
  stranger.address = "127.0.0.9:7001";
  const std::string hello = EncodePeerHello(stranger);
  for (int id = 1; id <= 3; ++id) {
    for (const std::string& attempt : attempts) {
      const int fd = ConnectTo(cluster_.raft_address(id));
      ASSERT_GE(fd, 0);
      (void)send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
      (void)send(fd, attempt.data(), attempt.size(), MSG_NOSIGNAL);
      char status = 0;
      EXPECT_EQ(recv(fd, &status, 1, MSG_WAITALL), 1) << "node " << id;
      EXPECT_NE(status, 0) << "node " << id << " accepted a stranger";
      char more;
      EXPECT_LE(recv(fd, &more, 1, MSG_WAITALL), 0) << "node " << id;
      close(fd);
    }
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const std::vector<uint64_t> after = Terms(cluster_);
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_LE(after[i], before[i] + 2) << "node " << i + 1;
  }
  const auto keys = BeginAndComplete(leader_, 20, "after-strangers");
  ExpectDuplicates(leader_, keys);
}

// 1,000 connections that send nothing and 1,000 that stop mid-hello, while
// the group takes writes: every one is closed within the handshake timeout
// (2 s here), and no write fails.
class HandshakeFloodTest : public ClusterTest {
 protected:
  HandshakeFloodTest() : ClusterTest({"--peer_handshake_timeout_ms=2000"}) {}
};

TEST_F(HandshakeFloodTest, SilentAndHalfOpenConnectionsAreClosed) {
  struct rlimit files {};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  ASSERT_GE(files.rlim_cur, 2200u) << "too few file descriptors to try";
  std::atomic<bool> stop{false};
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int round = 0; !stop.load(); ++round) {
      const auto keys = BeginAndComplete(
          leader_, 10, "during-flood-" + std::to_string(round));
      written.fetch_add(static_cast<int>(keys.size()));
    }
  });
  const std::string half_hello = MemberHello("127.0.0.9:1").substr(0, 10);
  std::vector<int> fds;
  for (int i = 0; i < 2000; ++i) {
    const int fd = ConnectTo(cluster_.raft_address(1 + i % 3));
    ASSERT_GE(fd, 0) << "connection " << i << ": " << strerror(errno);
    if (i % 2 == 1) (void)send(fd, half_hello.data(), half_hello.size(), 0);
    fds.push_back(fd);
  }
  // The timeout, plus room for a loaded machine.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(6);
  size_t closed = 0;
  std::vector<bool> seen(fds.size(), false);
  while (closed < fds.size() && std::chrono::steady_clock::now() < until) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (seen[i]) continue;
      char byte;
      const ssize_t n = recv(fds[i], &byte, 1, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        seen[i] = true;
        ++closed;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (int fd : fds) close(fd);
  stop = true;
  writer.join();
  EXPECT_EQ(closed, fds.size()) << "connections still open after 6 s";
  EXPECT_GT(written.load(), 0);
  for (int id = 1; id <= 3; ++id) {
    EXPECT_FALSE(
        cluster_.process(id)->WaitForExit(std::chrono::milliseconds(0)))
        << "node " << id << " exited";
  }
  ExpectIdenticalReplicas();
}

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
