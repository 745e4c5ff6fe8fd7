#include "replication/peer_plane_pump.h"

#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "common/thread_name.h"

namespace dedup {
namespace {

constexpr size_t kRelayBuffer = 64 << 10;
constexpr int kMaxEvents = 64;
// epoll data of the wake eventfd; entries use (id << 1 | network side).
constexpr uint64_t kWake = 0;

[[nodiscard]] bool WriteFdAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void Watch(int epoll_fd, int fd, uint32_t events, uint64_t data) {
  struct epoll_event event {};
  event.events = events;
  event.data.u64 = data;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event);
}

}  // namespace

RelayPump::RelayPump(Direction direction, Ended ended)
    : direction_(direction), ended_(std::move(ended)) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (!ok()) return;
  Watch(epoll_fd_, wake_fd_, EPOLLIN, kWake);
  thread_ = std::thread([this] {
    NameThisThread(direction_ == Direction::kInbound ? "dedup-pump-in"
                                                     : "dedup-pump-out");
    Run();
  });
}

RelayPump::~RelayPump() {
  Stop();
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

bool RelayPump::Add(PumpedConnection& connection) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ || !ok()) return false;
    added_.push_back(std::move(connection));
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  return true;
}

void RelayPump::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  thread_.join();
}

void RelayPump::AdoptAdded() {
  std::vector<PumpedConnection> added;
  {
    absl::MutexLock lock(&mu_);
    added.swap(added_);
  }
  for (PumpedConnection& connection : added) {
    const uint64_t id = next_id_++;
    auto entry = std::make_unique<Entry>();
    entry->connection = std::move(connection);
    const int network_fd = entry->connection.link->fd();
    if (direction_ == Direction::kOutbound) {
      Watch(epoll_fd_, entry->connection.pair_fd, EPOLLIN, id << 1);
      // The receiver never sends: readable means it closed.
      Watch(epoll_fd_, network_fd, EPOLLIN | EPOLLRDHUP, id << 1 | 1);
    } else {
      Watch(epoll_fd_, network_fd, EPOLLIN | EPOLLRDHUP, id << 1 | 1);
    }
    entries_[id] = std::move(entry);
  }
}

void RelayPump::Run() {
  std::vector<char> buf(kRelayBuffer);
  struct epoll_event events[kMaxEvents];
  while (true) {
    const int n = epoll_wait(epoll_fd_, events, kMaxEvents, -1);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      const uint64_t data = events[i].data.u64;
      if (data == kWake) {
        uint64_t count;
        (void)!read(wake_fd_, &count, sizeof(count));
        AdoptAdded();
        continue;
      }
      const uint64_t id = data >> 1;
      auto it = entries_.find(id);
      if (it == entries_.end()) continue;  // ended earlier in this round
      std::optional<FrameReject> reject;
      if (!Relay(id, *it->second, (data & 1) != 0, buf, reject)) {
        End(id, reject);
      }
    }
    absl::MutexLock lock(&mu_);
    if (stopping_) break;
  }
  AdoptAdded();
  while (!entries_.empty()) End(entries_.begin()->first, std::nullopt);
}

bool RelayPump::Relay(uint64_t id, Entry& entry, bool network,
                      std::vector<char>& buf,
                      std::optional<FrameReject>& reject) {
  (void)id;
  PumpedConnection& c = entry.connection;
  if (direction_ == Direction::kOutbound) {
    if (network) return false;
    const ssize_t n = read(c.pair_fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) return true;
    return n > 0 && c.link->WriteAll(buf.data(), static_cast<size_t>(n));
  }
  // Inbound. TLS may hold decrypted bytes that epoll cannot see: read
  // them too before waiting again.
  do {
    const ssize_t n = c.link->Read(buf.data(), buf.size());
    if (n <= 0) return false;
    const absl::string_view bytes(buf.data(), static_cast<size_t>(n));
    reject = c.validator->Feed(bytes);
    if (reject.has_value()) return false;
    if (!WriteFdAll(c.pair_fd, bytes.data(), bytes.size())) return false;
  } while (c.link->ssl() != nullptr && SSL_pending(c.link->ssl()) > 0);
  return true;
}

void RelayPump::End(uint64_t id, std::optional<FrameReject> reject) {
  auto it = entries_.find(id);
  std::unique_ptr<Entry> entry = std::move(it->second);
  entries_.erase(it);
  PumpedConnection& c = entry->connection;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.link->fd(), nullptr);
  if (direction_ == Direction::kOutbound) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.pair_fd, nullptr);
  }
  ended_(c, reject);
}

}  // namespace dedup
