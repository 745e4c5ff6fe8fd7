#include "server/metrics_http_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace dedup {
namespace {

// Answer codes counted from the start (at 0), so rate() sees the first one.
constexpr int kCountedCodes[] = {200, 400, 401, 404, 405, 408, 414, 431, 505};
// How long accepting pauses when the process is out of descriptors.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
// How long a closing connection's unread input is drained (so that closing
// does not reset the connection before the client has read the answer).
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr int kSweepMs = 200;

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Internal Server Error";
  }
}

epoll_event Event(uint32_t events, int fd) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  return ev;
}

std::string Serialize(const HttpResponse& response, bool head_only) {
  std::string out = absl::StrCat("HTTP/1.1 ", response.status, " ",
                                 ReasonPhrase(response.status), "\r\n");
  for (const auto& [name, value] : response.headers) {
    absl::StrAppend(&out, name, ": ", value, "\r\n");
  }
  absl::StrAppend(&out, "Content-Length: ", response.body.size(), "\r\n");
  if (response.close) out += "Connection: close\r\n";
  out += "\r\n";
  if (!head_only) out += response.body;
  return out;
}

}  // namespace

MetricsHttpLoop::Counters MetricsHttpLoop::MakeCounters(
    prometheus::Registry& registry) {
  Counters c;
  c.requests = &prometheus::BuildCounter()
                    .Name("dedup_metrics_http_requests_total")
                    .Help(
                        "Requests to the metrics port by answer code (400, "
                        "405, 414, 431, 505: malformed or refused requests; "
                        "408: a request not sent in time)")
                    .Register(registry);
  for (int code : kCountedCodes) {
    c.by_code[code] = &c.requests->Add({{"code", absl::StrCat(code)}});
  }
  auto& closed = prometheus::BuildCounter()
                     .Name("dedup_metrics_http_connections_closed_total")
                     .Help(
                         "Metrics port connections closed by dedupd before "
                         "the client closed them, by reason")
                     .Register(registry);
  c.idle_timeout = &closed.Add({{"reason", "idle_timeout"}});
  c.request_timeout = &closed.Add({{"reason", "request_timeout"}});
  c.write_timeout = &closed.Add({{"reason", "write_timeout"}});
  c.evicted = &closed.Add({{"reason", "evicted"}});
  c.refused = &closed.Add({{"reason", "refused"}});
  c.open = &prometheus::BuildGauge()
                .Name("dedup_metrics_http_connections")
                .Help("Open connections to the metrics port")
                .Register(registry)
                .Add({});
  return c;
}

absl::StatusOr<std::unique_ptr<MetricsHttpLoop>> MetricsHttpLoop::Create(
    int listen_fd, HttpHandler handler, prometheus::Registry& registry,
    MetricsHttpOptions options) {
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  const int stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event listen_ev = Event(EPOLLIN, listen_fd);
  epoll_event stop_ev = Event(EPOLLIN, stop_fd);
  if (epoll_fd < 0 || stop_fd < 0 ||
      epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &listen_ev) != 0 ||
      epoll_ctl(epoll_fd, EPOLL_CTL_ADD, stop_fd, &stop_ev) != 0) {
    const std::string error = std::strerror(errno);
    for (int fd : {listen_fd, epoll_fd, stop_fd}) {
      if (fd >= 0) close(fd);
    }
    return absl::UnavailableError(absl::StrCat("metrics port: ", error));
  }
  return std::unique_ptr<MetricsHttpLoop>(
      new MetricsHttpLoop(listen_fd, epoll_fd, stop_fd, std::move(handler),
                          MakeCounters(registry), std::move(options)));
}

MetricsHttpLoop::MetricsHttpLoop(int listen_fd, int epoll_fd, int stop_fd,
                                 HttpHandler handler, Counters counters,
                                 MetricsHttpOptions options)
    : listen_fd_(listen_fd),
      epoll_fd_(epoll_fd),
      stop_fd_(stop_fd),
      handler_(std::move(handler)),
      counters_(std::move(counters)),
      options_(std::move(options)) {}

MetricsHttpLoop::~MetricsHttpLoop() {
  for (const auto& [fd, conn] : conns_) close(fd);
  counters_.open->Set(0);
  close(listen_fd_);
  close(stop_fd_);
  close(epoll_fd_);
}

void MetricsHttpLoop::Stop() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof(one));
}

void MetricsHttpLoop::Run() {
  epoll_event events[64];
  for (;;) {
    const int n = epoll_wait(epoll_fd_, events, 64, kSweepMs);
    if (n < 0 && errno != EINTR) return;
    now_ = Clock::now();
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_fd_) return;
      if (fd == listen_fd_) {
        AcceptAll();
      } else {
        OnEvent(fd, events[i].events);
      }
    }
    Sweep();
    closed_.clear();
  }
}

void MetricsHttpLoop::AcceptAll() {
  for (;;) {
    const int fd =
        accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        // Out of descriptors: make room from our own idle ones, else stop
        // accepting for a moment rather than spin on the readable socket.
        if (EvictOne()) continue;
        PauseAccepting();
      }
      return;
    }
    if (static_cast<int>(conns_.size()) >= options_.max_connections &&
        !EvictOne()) {
      close(fd);
      counters_.refused->Increment();
      continue;
    }
    auto conn = std::make_unique<Conn>();
    conn->fd = fd;
    conn->since = now_;
    epoll_event ev = Event(EPOLLIN, fd);
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      close(fd);
      continue;
    }
    conns_.emplace(fd, std::move(conn));
    counters_.open->Set(static_cast<double>(conns_.size()));
  }
}

void MetricsHttpLoop::PauseAccepting() {
  epoll_event ev = Event(0, listen_fd_);
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
  accept_paused_ = true;
  accept_paused_until_ = now_ + kAcceptPause;
}

bool MetricsHttpLoop::EvictOne() {
  const Conn* oldest = nullptr;
  for (const auto& [fd, conn] : conns_) {
    if (conn->state != State::kIdle && conn->state != State::kReading) {
      continue;
    }
    if (oldest == nullptr || conn->since < oldest->since) oldest = conn.get();
  }
  if (oldest == nullptr) return false;
  Close(oldest->fd, counters_.evicted);
  return true;
}

void MetricsHttpLoop::OnEvent(int fd, uint32_t events) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  if (c.state == State::kWriting) {
    if (events & (EPOLLERR | EPOLLHUP)) return Close(fd, nullptr);
    Flush(c);
    // A request pipelined behind the one just answered was read with it:
    // no new bytes will come to wake the loop for it.
    if (c.state == State::kReading) Process(c);
    return;
  }
  if (!Read(c)) return;
  if (c.state == State::kLingering) {
    if (c.peer_closed) Close(fd, nullptr);
    return;
  }
  Process(c);
}

bool MetricsHttpLoop::Read(Conn& c) {
  // Enough for the parser to see a head too large; the rest waits unread.
  const size_t cap = options_.limits.max_head + 1;
  char buf[16384];
  while (!c.peer_closed &&
         (c.state == State::kLingering || c.in.size() < cap)) {
    const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      if (c.state != State::kLingering) c.in.append(buf, n);
      continue;
    }
    if (n == 0) {
      c.peer_closed = true;
    } else if (errno == EINTR) {
      continue;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      Close(c.fd, nullptr);
      return false;
    }
    break;
  }
  return true;
}

void MetricsHttpLoop::Process(Conn& c) {
  while (c.state == State::kIdle || c.state == State::kReading) {
    if (c.in.empty()) {
      if (c.peer_closed) return Close(c.fd, nullptr);
      return;
    }
    if (c.state == State::kIdle) {
      c.state = State::kReading;
      c.since = now_;
    }
    ParseResult parsed = ParseHttpRequest(c.in, options_.limits);
    if (parsed.state == ParseState::kIncomplete) {
      if (c.peer_closed) Close(c.fd, nullptr);
      return;
    }
    if (parsed.state == ParseState::kError) {
      return AnswerError(c, parsed.status, parsed.reason);
    }
    c.in.erase(0, parsed.consumed);
    HttpResponse response;
    try {
      response = handler_(parsed.request);
    } catch (const std::exception& e) {
      response = HttpResponse{500, {}, absl::StrCat(e.what(), "\n"), true};
    }
    // Bodies are not read: what follows the head is not a request.
    if (!parsed.request.keep_alive || parsed.request.has_body ||
        c.peer_closed) {
      response.close = true;
    }
    Answer(c, std::move(response), parsed.request.method == "HEAD");
  }
}

void MetricsHttpLoop::AnswerError(Conn& c, int status,
                                  const std::string& reason) {
  HttpResponse response;
  response.status = status;
  response.headers = {{"Content-Type", "text/plain; charset=utf-8"}};
  response.body =
      absl::StrCat(status, " ", ReasonPhrase(status), ": ", reason, "\n");
  response.close = true;
  Answer(c, std::move(response), /*head_only=*/false);
}

void MetricsHttpLoop::Answer(Conn& c, HttpResponse response, bool head_only) {
  Count(response.status);
  c.out = Serialize(response, head_only);
  c.out_pos = 0;
  c.close_after = response.close;
  c.state = State::kWriting;
  c.since = now_;
  Flush(c);
}

void MetricsHttpLoop::Flush(Conn& c) {
  while (c.out_pos < c.out.size()) {
    const ssize_t n = send(c.fd, c.out.data() + c.out_pos,
                           c.out.size() - c.out_pos, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_pos += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return Watch(c, EPOLLOUT);
    } else {
      return Close(c.fd, nullptr);
    }
  }
  c.out.clear();
  c.out_pos = 0;
  if (c.close_after) return Linger(c);
  c.state = c.in.empty() ? State::kIdle : State::kReading;
  c.since = now_;
  Watch(c, EPOLLIN);
}

void MetricsHttpLoop::Linger(Conn& c) {
  if (c.peer_closed) return Close(c.fd, nullptr);
  shutdown(c.fd, SHUT_WR);
  c.in.clear();
  c.state = State::kLingering;
  c.since = now_;
  Watch(c, EPOLLIN);
}

void MetricsHttpLoop::Watch(const Conn& c, uint32_t events) {
  epoll_event ev = Event(events, c.fd);
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
}

void MetricsHttpLoop::Close(int fd, prometheus::Counter* reason) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  if (reason != nullptr) reason->Increment();
  close(fd);  // also leaves the epoll set
  it->second->state = State::kClosed;
  // Callers up the stack may still hold the Conn: freed after the event.
  closed_.push_back(std::move(it->second));
  conns_.erase(it);
  counters_.open->Set(static_cast<double>(conns_.size()));
}

void MetricsHttpLoop::Sweep() {
  if (accept_paused_ && now_ >= accept_paused_until_) {
    epoll_event ev = Event(EPOLLIN, listen_fd_);
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
    accept_paused_ = false;
  }
  std::vector<int> expired;
  for (const auto& [fd, conn] : conns_) {
    const auto age = now_ - conn->since;
    const bool late =
        (conn->state == State::kIdle &&
         age > absl::ToChronoNanoseconds(options_.idle_timeout)) ||
        (conn->state == State::kReading &&
         age > absl::ToChronoNanoseconds(options_.request_timeout)) ||
        (conn->state == State::kWriting &&
         age > absl::ToChronoNanoseconds(options_.write_timeout)) ||
        (conn->state == State::kLingering && age > kLingerTime);
    if (late) expired.push_back(fd);
  }
  for (int fd : expired) {
    Conn& c = *conns_.at(fd);
    switch (c.state) {
      case State::kClosed:
        break;
      case State::kIdle:
        Close(fd, counters_.idle_timeout);
        break;
      case State::kReading:
        counters_.request_timeout->Increment();
        AnswerError(c, 408, "the request was not complete in time");
        break;
      case State::kWriting:
        Close(fd, counters_.write_timeout);
        break;
      case State::kLingering:
        Close(fd, nullptr);
        break;
    }
  }
}

void MetricsHttpLoop::Count(int status) {
  auto it = counters_.by_code.find(status);
  if (it == counters_.by_code.end()) {
    it =
        counters_.by_code
            .emplace(status,
                     &counters_.requests->Add({{"code", absl::StrCat(status)}}))
            .first;
  }
  it->second->Increment();
}

}  // namespace dedup
