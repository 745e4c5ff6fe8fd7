#include "server/loopback_address.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace dedup {
namespace {

bool IsLoopback(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  }
  if (address->sa_family == AF_INET6) {
    const in6_addr& v6 =
        reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace

absl::string_view HostOfListeningAddress(absl::string_view address) {
  absl::string_view host = address;
  if (!absl::ConsumePrefix(&host, "ipv4:")) absl::ConsumePrefix(&host, "ipv6:");
  if (absl::StartsWith(host, "[")) {
    const size_t close = host.find(']');
    return close == absl::string_view::npos ? host.substr(1)
                                            : host.substr(1, close - 1);
  }
  const size_t colon = host.rfind(':');
  // More than one colon and no brackets: an IPv6 literal without a port.
  if (colon == absl::string_view::npos || host.find(':') != colon) return host;
  return host.substr(0, colon);
}

absl::StatusOr<bool> BindsOnlyLoopback(absl::string_view address,
                                       absl::string_view flag) {
  if (absl::StartsWith(address, "unix:") ||
      absl::StartsWith(address, "unix-abstract:")) {
    return false;
  }
  const std::string host(HostOfListeningAddress(address));
  if (host.empty()) return false;  // ":port": every interface
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int error = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (error != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", address, ": host '", host,
                     "' does not resolve (", gai_strerror(error), ")"));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found,
                                                           &freeaddrinfo);
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (!IsLoopback(a->ai_addr)) return false;
  }
  return found != nullptr;
}

}  // namespace dedup
