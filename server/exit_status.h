// A failure that ends dedupd, with the exit code it ends with
// (common/exit_codes.h) carried as a payload of the absl::Status.
#ifndef DEDUP_SERVER_EXIT_STATUS_H_
#define DEDUP_SERVER_EXIT_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "common/exit_codes.h"

namespace dedup {

inline constexpr absl::string_view kExitCodePayload = "dedup-exit-code";

// A status whose message is the line to log and which ends the process with
// `code`.
[[nodiscard]] inline absl::Status ExitWith(int code,
                                           absl::string_view message) {
  absl::Status status = absl::UnknownError(message);
  status.SetPayload(kExitCodePayload, absl::Cord(std::to_string(code)));
  return status;
}

// 0 for OK, the code given to ExitWith, else exit_code::kStopError.
[[nodiscard]] inline int ExitCodeOf(const absl::Status& status) {
  if (status.ok()) return exit_code::kCleanStop;
  int code = exit_code::kStopError;
  if (auto payload = status.GetPayload(kExitCodePayload)) {
    if (!absl::SimpleAtoi(std::string(*payload), &code)) {
      code = exit_code::kStopError;
    }
  }
  return code;
}

}  // namespace dedup

#endif  // DEDUP_SERVER_EXIT_STATUS_H_
