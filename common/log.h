// dedupd's log: one line per call on stderr, "dedupd: <message>". The line's
// format lives in log.cc only, so that it can change in one place.
//
// Thread-safe: lines from concurrent calls never interleave. No gRPC or
// protobuf here: storage/ and replication/ may link it.
#ifndef DEDUP_COMMON_LOG_H_
#define DEDUP_COMMON_LOG_H_

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dedup {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below `level` are dropped. Default kInfo.
void SetLogLevel(LogLevel level);
[[nodiscard]] LogLevel GetLogLevel();
// "debug", "info", "warning" or "error".
[[nodiscard]] absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);

// Writes "dedupd: <message>" and a newline to stderr, then flushes, unless
// `level` is below the current level.
void Log(LogLevel level, absl::string_view message);

// A line people look for at start-up ("dedupd listening on ...", "dedupd
// metrics on ..."): "dedupd <message>", at every level. Programs read
// --ready_file instead.
void LogAnnouncement(absl::string_view message);

template <typename... Args>
void LogDebug(const Args&... args) {
  if (GetLogLevel() <= LogLevel::kDebug)
    Log(LogLevel::kDebug, absl::StrCat(args...));
}
template <typename... Args>
void LogInfo(const Args&... args) {
  Log(LogLevel::kInfo, absl::StrCat(args...));
}
template <typename... Args>
void LogWarning(const Args&... args) {
  Log(LogLevel::kWarning, absl::StrCat(args...));
}
template <typename... Args>
void LogError(const Args&... args) {
  Log(LogLevel::kError, absl::StrCat(args...));
}

}  // namespace dedup

#endif  // DEDUP_COMMON_LOG_H_
