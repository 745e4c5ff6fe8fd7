// The node-to-node plane in one process: a listening plane and a dialling
// one over loopback, plaintext and TLS (the test PKI), checking what
// reaches "libraft" (the socketpair end the plane delivers) and what not.
#include "replication/peer_plane.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/testing/test_pki.h"
#include "tests/unit/raft_frame_vectors.h"

namespace dedup {
namespace {

using Clock = std::chrono::steady_clock;

std::string* pki = nullptr;
std::string Pki(const std::string& name) { return *pki + "/" + name; }

// What the listening plane handed to "libraft".
struct Delivered {
  int fd;
  uint64_t id;
  std::string address;
};

class Inbox {
 public:
  PeerDeliver Deliver() {
    return [this](int fd, uint64_t id, const std::string& address) {
      absl::MutexLock lock(&mu_);
      got_.push_back({fd, id, address});
    };
  }
  std::optional<Delivered> Wait(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(this, &Inbox::HasSome),
                              timeout)) {
      return std::nullopt;
    }
    Delivered d = got_.front();
    got_.erase(got_.begin());
    return d;
  }

 private:
  bool HasSome() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !got_.empty();
  }

  absl::Mutex mu_;
  std::vector<Delivered> got_ ABSL_GUARDED_BY(mu_);
};

// The fd a dial ended with (-1: refused).
class DialResult {
 public:
  std::function<void(int)> Done() {
    return [this](int fd) {
      absl::MutexLock lock(&mu_);
      fd_ = fd;
    };
  }
  int Wait() {
    absl::MutexLock lock(&mu_);
    EXPECT_TRUE(mu_.AwaitWithTimeout(absl::Condition(this, &DialResult::IsSet),
                                     absl::Seconds(10)));
    return fd_.value_or(-2);
  }

 private:
  bool IsSet() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return fd_.has_value();
  }

  absl::Mutex mu_;
  std::optional<int> fd_ ABSL_GUARDED_BY(mu_);
};

std::shared_ptr<PeerTls> Tls(const std::string& cert, const std::string& key) {
  absl::StatusOr<std::shared_ptr<PeerTls>> tls =
      PeerTls::FromFiles({Pki(cert), Pki(key), Pki("ca.pem")});
  EXPECT_TRUE(tls.ok()) << tls.status();
  return tls.ok() ? *tls : nullptr;
}

std::shared_ptr<PeerPlane> Plane(PeerPlaneOptions options) {
  options.listen_address = "127.0.0.1:0";
  absl::StatusOr<std::shared_ptr<PeerPlane>> plane =
      PeerPlane::Create(std::move(options));
  EXPECT_TRUE(plane.ok()) << plane.status();
  EXPECT_TRUE((*plane)->Listen().ok());
  return *plane;
}

int RawConnect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  return fd;
}

// Waits up to `timeout` for `fd` to end (EOF or reset): true if it did.
bool EndsWithin(int fd, std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    struct pollfd p {};
    p.fd = fd;
    p.events = POLLIN;
    const int left =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                             until - Clock::now())
                             .count());
    if (poll(&p, 1, std::max(left, 1)) != 1) continue;
    char byte;
    const ssize_t n = recv(fd, &byte, 1, 0);
    if (n <= 0) return true;
  }
  return false;
}

PeerPlane::Dial DialTo(const PeerPlane& to, uint64_t self_id = 2,
                       uint32_t group = 0) {
  PeerPlane::Dial dial;
  dial.group_id = group;
  dial.self_id = self_id;
  dial.self_address = "127.0.0.2:7000";
  dial.peer_address = "127.0.0.1:" + std::to_string(to.port());
  return dial;
}

uint64_t Handshakes(const PeerPlane& plane, HandshakeResult result) {
  return plane.metrics().handshakes[static_cast<int>(result)].load();
}

class PeerPlaneTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> made = testing::MakeTestPki();
    ASSERT_TRUE(made.ok()) << made.status();
    pki = new std::string(*made);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*pki);
    delete pki;
  }

  std::shared_ptr<PeerGroup> group_ = std::make_shared<PeerGroup>();
  Inbox inbox_;
};

TEST_F(PeerPlaneTest, SilentConnectionIsClosedAtItsDeadline) {
  PeerPlaneOptions options;
  options.handshake_timeout_ms = 300;
  auto plane = Plane(options);
  plane->RegisterGroup(0, group_, inbox_.Deliver());
  const int fd = RawConnect(plane->port());
  const auto start = Clock::now();
  EXPECT_TRUE(EndsWithin(fd, std::chrono::milliseconds(3000)));
  const auto took = Clock::now() - start;
  EXPECT_GE(took, std::chrono::milliseconds(250));
  EXPECT_LT(took, std::chrono::milliseconds(2000));
  EXPECT_EQ(Handshakes(*plane, HandshakeResult::kTimeout), 1u);
  EXPECT_FALSE(inbox_.Wait(absl::ZeroDuration()).has_value());
  close(fd);
}

TEST_F(PeerPlaneTest, ConnectionsBeyondTheHandshakeCapAreClosedAtOnce) {
  PeerPlaneOptions options;
  options.max_handshakes = 2;
  auto plane = Plane(options);
  const int a = RawConnect(plane->port());
  const int b = RawConnect(plane->port());
  // The first two wait for their hello; the third is over the cap.
  EXPECT_FALSE(EndsWithin(a, std::chrono::milliseconds(200)));
  const int c = RawConnect(plane->port());
  // Told "busy" (status 5, plaintext) and closed.
  struct pollfd p {};
  p.fd = c;
  p.events = POLLIN;
  ASSERT_EQ(poll(&p, 1, 1000), 1);
  char status = 0;
  EXPECT_EQ(recv(c, &status, 1, 0), 1);
  EXPECT_EQ(status, static_cast<char>(PeerHelloStatus::kBusy));
  EXPECT_TRUE(EndsWithin(c, std::chrono::milliseconds(1000)));
  EXPECT_EQ(Handshakes(*plane, HandshakeResult::kBusy), 1u);
  for (int fd : {a, b, c}) close(fd);
}

TEST_F(PeerPlaneTest, TlsRoundTripDeliversWhatThePeerSent) {
  PeerPlaneOptions server;
  server.tls = Tls("server.pem", "server.key");
  std::vector<PeerCredentials> seen;
  absl::Mutex seen_mu;
  server.authenticator = [&](const PeerCredentials& peer) {
    absl::MutexLock lock(&seen_mu);
    seen.push_back(peer);
    return absl::OkStatus();
  };
  auto listener = Plane(server);
  listener->RegisterGroup(0, group_, inbox_.Deliver());
  PeerPlaneOptions client;
  client.tls = Tls("server.pem", "server.key");
  client.token = "ops-token";
  auto dialler = Plane(client);
  DialResult dial;
  dialler->Connect(DialTo(*listener), dial.Done());
  const int out = dial.Wait();
  ASSERT_GE(out, 0);
  std::optional<Delivered> in = inbox_.Wait(absl::Seconds(5));
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(in->id, 2u);
  EXPECT_EQ(in->address, "127.0.0.2:7000");
  {
    absl::MutexLock lock(&seen_mu);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_TRUE(seen[0].certificate_verified);
    EXPECT_EQ(seen[0].token, "ops-token");
    EXPECT_NE(seen[0].certificate_subject.find("CN=server"), std::string::npos);
  }
  const std::string message = absl::HexStringToBytes(kRealMessages[2].hex);
  ASSERT_EQ(write(out, message.data(), message.size()),
            static_cast<ssize_t>(message.size()));
  std::string got(message.size(), '\0');
  size_t have = 0;
  while (have < got.size()) {
    const ssize_t n = read(in->fd, got.data() + have, got.size() - have);
    ASSERT_GT(n, 0);
    have += static_cast<size_t>(n);
  }
  EXPECT_EQ(got, message);
  EXPECT_EQ(Handshakes(*listener, HandshakeResult::kOk), 1u);
  // libraft closing its end ends the relay and the network connection.
  close(out);
  EXPECT_TRUE(EndsWithin(in->fd, std::chrono::milliseconds(3000)));
  close(in->fd);
}

TEST_F(PeerPlaneTest, CertificateFromAnotherCaFailsTls) {
  PeerPlaneOptions server;
  server.tls = Tls("server.pem", "server.key");
  auto listener = Plane(server);
  listener->RegisterGroup(0, group_, inbox_.Deliver());
  PeerPlaneOptions client;
  client.tls = Tls("client-rogue.pem", "client-rogue.key");
  auto dialler = Plane(client);
  DialResult dial;
  dialler->Connect(DialTo(*listener), dial.Done());
  EXPECT_EQ(dial.Wait(), -1);
  EXPECT_FALSE(inbox_.Wait(absl::Milliseconds(300)).has_value());
  EXPECT_EQ(Handshakes(*listener, HandshakeResult::kTlsFailed), 1u);
}

TEST_F(PeerPlaneTest, RefusedByTheAuthenticatorNothingIsDelivered) {
  PeerPlaneOptions server;
  server.tls = Tls("server.pem", "server.key");
  server.authenticator = [](const PeerCredentials& peer) {
    return peer.token == "ops-token"
               ? absl::OkStatus()
               : absl::PermissionDeniedError("the token is not known");
  };
  auto listener = Plane(server);
  listener->RegisterGroup(0, group_, inbox_.Deliver());
  PeerPlaneOptions client;
  client.tls = Tls("server.pem", "server.key");
  client.token = "guessed";
  auto dialler = Plane(client);
  DialResult dial;
  dialler->Connect(DialTo(*listener), dial.Done());
  EXPECT_EQ(dial.Wait(), -1);
  EXPECT_FALSE(inbox_.Wait(absl::Milliseconds(300)).has_value());
  EXPECT_EQ(Handshakes(*listener, HandshakeResult::kUnauthorized), 1u);
  EXPECT_EQ(Handshakes(*listener, HandshakeResult::kOk), 0u);
}

TEST_F(PeerPlaneTest, UnknownGroupAndNonMemberAreRefused) {
  auto listener = Plane({});
  group_->SetMembers({1, 3});
  listener->RegisterGroup(0, group_, inbox_.Deliver());
  auto dialler = Plane({});
  DialResult other_group;
  dialler->Connect(DialTo(*listener, 3, /*group=*/5), other_group.Done());
  EXPECT_EQ(other_group.Wait(), -1);
  DialResult stranger;
  dialler->Connect(DialTo(*listener, 2), stranger.Done());
  EXPECT_EQ(stranger.Wait(), -1);
  EXPECT_EQ(Handshakes(*listener, HandshakeResult::kUnauthorized), 2u);
  DialResult member;
  dialler->Connect(DialTo(*listener, 3), member.Done());
  const int fd = member.Wait();
  EXPECT_GE(fd, 0);
  EXPECT_TRUE(inbox_.Wait(absl::Seconds(5)).has_value());
  close(fd);
}

TEST_F(PeerPlaneTest, RejectedFrameClosesTheConnectionAndCounts) {
  auto listener = Plane({});
  listener->RegisterGroup(0, group_, inbox_.Deliver());
  auto dialler = Plane({});
  DialResult dial;
  dialler->Connect(DialTo(*listener), dial.Done());
  const int out = dial.Wait();
  ASSERT_GE(out, 0);
  std::optional<Delivered> in = inbox_.Wait(absl::Seconds(5));
  ASSERT_TRUE(in.has_value());
  // Message type 99, header of 8 bytes: no such libraft message.
  std::string frame(24, '\0');
  frame[0] = 99;
  frame[8] = 8;
  ASSERT_EQ(write(out, frame.data(), frame.size()), 24);
  // Not one byte of it reaches libraft's end, which is closed.
  char byte;
  struct pollfd p {};
  p.fd = in->fd;
  p.events = POLLIN;
  ASSERT_EQ(poll(&p, 1, 3000), 1);
  EXPECT_EQ(read(in->fd, &byte, 1), 0);
  EXPECT_EQ(listener->metrics()
                .frames_rejected[static_cast<int>(FrameReject::kUnknownType)]
                .load(),
            1u);
  close(in->fd);
  close(out);
}

TEST_F(PeerPlaneTest, DiallerNoticesTheReceiversEndWithoutWriting) {
  auto listener = Plane({});
  listener->RegisterGroup(0, group_, inbox_.Deliver());
  auto dialler = Plane({});
  DialResult dial;
  dialler->Connect(DialTo(*listener), dial.Done());
  const int out = dial.Wait();
  ASSERT_GE(out, 0);
  std::optional<Delivered> in = inbox_.Wait(absl::Seconds(5));
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(dialler->metrics().connections.load(), 1);
  // The receiving node goes away: libraft's outbound end is closed at once,
  // so it reconnects instead of writing its next message into the void.
  listener->Stop();
  EXPECT_TRUE(EndsWithin(out, std::chrono::milliseconds(3000)));
  close(in->fd);
  close(out);
}

// Threads of this process now.
int Threads() {
  int n = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++n;
  }
  return n;
}

// Reads exactly `size` bytes from `fd` (empty on EOF, error, or nothing for
// 5 s).
std::string ReadExactly(int fd, size_t size) {
  std::string got(size, '\0');
  size_t have = 0;
  while (have < size) {
    struct pollfd p {};
    p.fd = fd;
    p.events = POLLIN;
    if (poll(&p, 1, 5000) != 1) return "";
    const ssize_t n = read(fd, got.data() + have, size - have);
    if (n <= 0) return "";
    have += static_cast<size_t>(n);
  }
  return got;
}

// Connections of many groups to one peer: each direction is relayed by one
// thread for all of them, bytes stay on their own connection, and one
// connection's end leaves the others relaying.
TEST_F(PeerPlaneTest, ConnectionsToOnePeerShareOneRelayThreadPerDirection) {
  for (const bool tls : {false, true}) {
    SCOPED_TRACE(tls ? "tls" : "plaintext");
    constexpr int kGroups = 8;
    PeerPlaneOptions options;
    if (tls) options.tls = Tls("server.pem", "server.key");
    auto listener = Plane(options);
    auto dialler = Plane(options);
    std::vector<std::unique_ptr<Inbox>> inboxes;
    for (int g = 0; g < kGroups; ++g) {
      inboxes.push_back(std::make_unique<Inbox>());
      listener->RegisterGroup(g, group_, inboxes.back()->Deliver());
    }
    const int threads_before = Threads();
    std::vector<int> out(kGroups), in(kGroups);
    for (int g = 0; g < kGroups; ++g) {
      DialResult dial;
      dialler->Connect(DialTo(*listener, 2, g), dial.Done());
      out[g] = dial.Wait();
      ASSERT_GE(out[g], 0);
      std::optional<Delivered> delivered = inboxes[g]->Wait(absl::Seconds(5));
      ASSERT_TRUE(delivered.has_value());
      in[g] = delivered->fd;
    }
    // (Dial threads end once they handed their connection over.)
    int threads_after = Threads();
    for (int i = 0; i < 100 && threads_after > threads_before + 2; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      threads_after = Threads();
    }
    EXPECT_LE(threads_after, threads_before + 2);
    // Every group writes at once; each reads only its own messages.
    std::vector<std::string> sent(kGroups);
    for (int g = 0; g < kGroups; ++g) {
      sent[g] = absl::HexStringToBytes(kRealMessages[2 + g % 2].hex);
      ASSERT_EQ(write(out[g], sent[g].data(), sent[g].size()),
                static_cast<ssize_t>(sent[g].size()));
    }
    for (int g = 0; g < kGroups; ++g) {
      EXPECT_EQ(ReadExactly(in[g], sent[g].size()), sent[g]) << g;
    }
    // Group 0's libraft closes its end: only its connection ends.
    close(out[0]);
    EXPECT_TRUE(EndsWithin(in[0], std::chrono::milliseconds(3000)));
    for (int g = 1; g < kGroups; ++g) {
      ASSERT_EQ(write(out[g], sent[g].data(), sent[g].size()),
                static_cast<ssize_t>(sent[g].size()));
      EXPECT_EQ(ReadExactly(in[g], sent[g].size()), sent[g]) << g;
    }
    for (int i = 0;
         i < 150 && dialler->metrics().connections.load() != kGroups - 1; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(dialler->metrics().connections.load(), kGroups - 1);
    for (int g = 0; g < kGroups; ++g) {
      if (g > 0) close(out[g]);
      close(in[g]);
    }
  }
}

}  // namespace
}  // namespace dedup
