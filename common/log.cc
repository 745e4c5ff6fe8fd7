#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/base/const_init.h"
#include "absl/synchronization/mutex.h"

namespace dedup {
namespace {

std::atomic<int> level{static_cast<int>(LogLevel::kInfo)};
// One writer at a time: a line is built whole, then written and flushed.
ABSL_CONST_INIT absl::Mutex write_mu(absl::kConstInit);

void WriteLine(absl::string_view prefix, absl::string_view message) {
  const std::string line = absl::StrCat(prefix, message, "\n");
  absl::MutexLock lock(&write_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace

void SetLogLevel(LogLevel l) { level.store(static_cast<int>(l)); }

LogLevel GetLogLevel() { return static_cast<LogLevel>(level.load()); }

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown log level \"", name, "\" (debug, info, warning or error)"));
}

void Log(LogLevel l, absl::string_view message) {
  if (static_cast<int>(l) < level.load()) return;
  WriteLine("dedupd: ", message);
}

void LogAnnouncement(absl::string_view message) {
  WriteLine("dedupd ", message);
}

}  // namespace dedup
