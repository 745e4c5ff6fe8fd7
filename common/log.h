// dedupd's process log: every line it writes to stderr goes through here.
//
// By default each line is one JSON object (kJson):
//   {"ts":"2026-11-27T08:44:09.123456Z","level":"info","component":"server",
//    "msg":"listening on 127.0.0.1:50051 (...)","event":"listening",...}
// ts is RFC 3339 in UTC with microseconds; level is debug, info, warning or
// error; component names the part of dedupd (or the library) that wrote it;
// msg is the text; further string fields may follow. kText writes the same as
// "<ts> <LEVEL> <component>: <msg> key=value..." for people reading a
// terminal. The format lives in log.cc only.
//
// The component of LogInfo() etc. is the library the calling file belongs to:
// each CMake target compiles this header with DEDUP_LOG_COMPONENT set (server,
// storage, replication), so call sites need not name it. The templates live in
// an inline namespace named after the component, so that the libraries'
// instantiations stay distinct entities (one definition rule). Lines from
// other libraries (gRPC, RocksDB, libraft) name theirs through Log().
//
// Thread-safe: a line is built whole and written with one write under a
// mutex, so lines from concurrent calls never interleave. No gRPC or protobuf
// here: storage/ and replication/ link it.
#ifndef DEDUP_COMMON_LOG_H_
#define DEDUP_COMMON_LOG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace dedup {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
enum class LogFormat { kJson, kText };

// Lines below `level` are dropped. Default kInfo.
void SetLogLevel(LogLevel level);
[[nodiscard]] LogLevel GetLogLevel();
// "debug", "info", "warning" or "error".
[[nodiscard]] absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);

// Default kJson. Set once at start-up, before other threads log (a line
// written while it changes has either format).
void SetLogFormat(LogFormat format);
[[nodiscard]] LogFormat GetLogFormat();
// "json" or "text".
[[nodiscard]] absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);

// Where ts comes from: absl::Now by default; tests pin it. nullptr restores
// the default. Not for use while other threads log.
void SetLogClockForTesting(absl::Time (*now)());

// A structured field after msg; its value is written as a JSON string.
struct LogField {
  absl::string_view key;
  std::string value;
};

// Writes one line (see the top of this file) to stderr and flushes, unless
// `level` is below the current level. `component` is a short lowercase name
// ("grpc", "rocksdb", "raft", ...). Keys of `fields` must not need escaping
// and must not be ts, level, component or msg.
void Log(LogLevel level, absl::string_view component, absl::string_view message,
         absl::Span<const LogField> fields = {});

// A line people look for ("listening on ...", "metrics on ..."): written at
// info whatever the level, with an "event" field naming it (e.g.
// "listening") for log processors. Programs read --ready_file instead.
void LogAnnouncement(absl::string_view component, absl::string_view event,
                     absl::string_view message,
                     absl::Span<const LogField> fields = {});

#ifndef DEDUP_LOG_COMPONENT
#define DEDUP_LOG_COMPONENT dedupd
#endif
#define DEDUP_LOG_INTERNAL_CAT2(a, b) a##b
#define DEDUP_LOG_INTERNAL_CAT(a, b) DEDUP_LOG_INTERNAL_CAT2(a, b)
#define DEDUP_LOG_INTERNAL_STR2(a) #a
#define DEDUP_LOG_INTERNAL_STR(a) DEDUP_LOG_INTERNAL_STR2(a)
#define DEDUP_LOG_NAMESPACE DEDUP_LOG_INTERNAL_CAT(log_, DEDUP_LOG_COMPONENT)

inline namespace DEDUP_LOG_NAMESPACE {

// The component of this file's lines (see the top of this file).
inline constexpr absl::string_view kLogComponent =
    DEDUP_LOG_INTERNAL_STR(DEDUP_LOG_COMPONENT);

template <typename... Args>
void LogDebug(const Args&... args) {
  if (GetLogLevel() <= LogLevel::kDebug)
    Log(LogLevel::kDebug, kLogComponent, absl::StrCat(args...));
}
template <typename... Args>
void LogInfo(const Args&... args) {
  if (GetLogLevel() <= LogLevel::kInfo)
    Log(LogLevel::kInfo, kLogComponent, absl::StrCat(args...));
}
template <typename... Args>
void LogWarning(const Args&... args) {
  Log(LogLevel::kWarning, kLogComponent, absl::StrCat(args...));
}
template <typename... Args>
void LogError(const Args&... args) {
  Log(LogLevel::kError, kLogComponent, absl::StrCat(args...));
}

}  // namespace DEDUP_LOG_NAMESPACE

}  // namespace dedup

#endif  // DEDUP_COMMON_LOG_H_
