// Whether a listening address binds only to loopback, judged by what its
// host resolves to (as gRPC does when it binds), not by its spelling: a name
// such as "127.0.0.1.invalid" or one that /etc/hosts maps elsewhere is not
// loopback because it starts with "127.".
#ifndef DEDUP_SERVER_LOOPBACK_ADDRESS_H_
#define DEDUP_SERVER_LOOPBACK_ADDRESS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dedup {

// The host part of a gRPC listening address: "host:port", "[v6]:port", a
// bare IPv6 literal, or those behind an "ipv4:"/"ipv6:" scheme. Empty for
// ":port" (every interface).
[[nodiscard]] absl::string_view HostOfListeningAddress(
    absl::string_view address);

// True when `address` (see above) binds only to loopback: its host resolves
// (getaddrinfo, which may block on DNS) and every address it resolves to is
// in 127.0.0.0/8 or is ::1 (IPv4-mapped forms included). False for every
// interface (an empty host, 0.0.0.0, ::) and for other schemes (unix:).
// INVALID_ARGUMENT naming `flag` when the host does not resolve.
[[nodiscard]] absl::StatusOr<bool> BindsOnlyLoopback(absl::string_view address,
                                                     absl::string_view flag);

}  // namespace dedup

#endif  // DEDUP_SERVER_LOOPBACK_ADDRESS_H_
