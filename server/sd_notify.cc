#include "server/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dedup {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

absl::Status Failed(const std::string& socket, absl::string_view what,
                    int error) {
  return absl::UnavailableError(absl::StrCat("NOTIFY_SOCKET ", socket, ": ",
                                             what, ": ", std::strerror(error)));
}

}  // namespace

SdNotifier SdNotifier::FromEnvironment() {
  absl::Duration watchdog = absl::ZeroDuration();
  uint64_t usec = 0;
  uint64_t pid = 0;
  const std::string watchdog_pid = Env("WATCHDOG_PID");
  const bool ours =
      watchdog_pid.empty() || (absl::SimpleAtoi(watchdog_pid, &pid) &&
                               pid == static_cast<uint64_t>(getpid()));
  if (ours && absl::SimpleAtoi(Env("WATCHDOG_USEC"), &usec) && usec > 0) {
    watchdog = absl::Microseconds(usec);
  }
  return SdNotifier(Env("NOTIFY_SOCKET"), watchdog);
}

SdNotifier::SdNotifier(std::string socket, absl::Duration watchdog)
    : socket_(std::move(socket)), watchdog_(watchdog) {}

absl::Status SdNotifier::Notify(absl::string_view state) const {
  if (socket_.empty()) return absl::OkStatus();
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  // Only absolute paths and abstract names are valid (as in libsystemd).
  if ((socket_[0] != '/' && socket_[0] != '@') || socket_.size() < 2 ||
      socket_.size() > sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("NOTIFY_SOCKET ", socket_,
                     ": not an absolute path or @abstract name that fits"));
  }
  std::memcpy(address.sun_path, socket_.data(), socket_.size());
  // An abstract name has no terminating NUL: its length is the address's.
  if (socket_[0] == '@') address.sun_path[0] = '\0';
  const socklen_t length =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_.size());
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Failed(socket_, "socket", errno);
  const ssize_t sent =
      sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
             reinterpret_cast<const sockaddr*>(&address), length);
  const int error = errno;
  close(fd);
  if (sent < 0) return Failed(socket_, "sendto", error);
  return absl::OkStatus();
}

}  // namespace dedup
