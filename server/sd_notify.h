// systemd's service notification protocol (sd_notify(3)) without
// libsystemd: one datagram of newline-separated VAR=value lines to the
// AF_UNIX socket named by $NOTIFY_SOCKET (a path, or '@' for a name in the
// abstract namespace). A unit of Type=notify is "started" only once READY=1
// arrives, so `systemctl start` returns when dedupd serves, not when its
// process exists; WATCHDOG=1 keepalives let systemd restart a wedged
// process (WatchdogSec=).
//
// Outside systemd (no NOTIFY_SOCKET) every call does nothing and succeeds.
//
// Thread safety: immutable after construction; Notify may be called from any
// thread (each call sends on a socket of its own).
#ifndef DEDUP_SERVER_SD_NOTIFY_H_
#define DEDUP_SERVER_SD_NOTIFY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dedup {

class SdNotifier {
 public:
  // Reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID. The watchdog
  // applies only when WATCHDOG_PID is unset or names this process (systemd
  // sets it for the main process; a child must not answer for its parent).
  static SdNotifier FromEnvironment();

  // `socket` as in NOTIFY_SOCKET ("" disables); `watchdog` zero for none.
  SdNotifier(std::string socket, absl::Duration watchdog);
  SdNotifier() : SdNotifier("", absl::ZeroDuration()) {}

  // Whether systemd (or a test standing in for it) listens.
  [[nodiscard]] bool enabled() const { return !socket_.empty(); }

  // Sends `state` (e.g. "READY=1\nSTATUS=serving") as one datagram. OK
  // when disabled; an error names the socket and the failure (a supervisor
  // that went away is worth a log line, not a stop).
  [[nodiscard]] absl::Status Notify(absl::string_view state) const;

  // The interval within which systemd wants WATCHDOG=1 (WATCHDOG_USEC);
  // zero when it wants none. Keepalives go every half of it.
  [[nodiscard]] absl::Duration watchdog_timeout() const { return watchdog_; }

 private:
  std::string socket_;
  absl::Duration watchdog_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_SD_NOTIFY_H_
