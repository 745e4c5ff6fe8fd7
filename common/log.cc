#include "common/log.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/base/const_init.h"
#include "absl/strings/ascii.h"
#include "absl/synchronization/mutex.h"

namespace dedup {
namespace {

std::atomic<int> level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> format{static_cast<int>(LogFormat::kJson)};
std::atomic<absl::Time (*)()> clock_fn{nullptr};
// One writer at a time: a line is built whole, then written and flushed.
ABSL_CONST_INIT absl::Mutex write_mu(absl::kConstInit);

absl::string_view LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "error";
}

// Bytes of the UTF-8 sequence starting at text[i], or 0 if it is not a
// valid one (JSON must be UTF-8; a raw key or path in a message may not be).
size_t Utf8Length(absl::string_view text, size_t i) {
  const auto byte = [&](size_t k) {
    return static_cast<unsigned char>(text[k]);
  };
  const unsigned char c = byte(i);
  size_t n = 0;
  uint32_t lowest = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    lowest = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    lowest = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    lowest = 0x10000;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  uint32_t code = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  const bool surrogate = code >= 0xD800 && code <= 0xDFFF;
  return code < lowest || code > 0x10FFFF || surrogate ? 0 : n;
}

// `text` as the inside of a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced by U+FFFD.
void AppendJsonEscaped(std::string& out, absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out.append("\\n");
    } else if (c == '\t') {
      out.append("\\t");
    } else if (c < 0x20 || c == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\u%04x", c);
      out.append(hex);
    } else if (c >= 0x80) {
      const size_t n = Utf8Length(text, i);
      if (n == 0) {
        out.append("\\ufffd");
        ++i;
        continue;
      }
      out.append(text.substr(i, n).data(), n);
      i += n;
      continue;
    } else {
      out.push_back(static_cast<char>(c));
    }
    ++i;
  }
}

// `text` on one line for the text format: control characters as \n, \xNN.
void AppendTextEscaped(std::string& out, absl::string_view text) {
  for (const char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out.append("\\n");
    } else if (c < 0x20 || c == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out.append(hex);
    } else {
      out.push_back(ch);
    }
  }
}

std::string JsonLine(absl::string_view ts, LogLevel l,
                     absl::string_view component, absl::string_view message,
                     absl::Span<const LogField> fields) {
  std::string line = absl::StrCat("{\"ts\":\"", ts, "\",\"level\":\"",
                                  LevelName(l), "\",\"component\":\"");
  AppendJsonEscaped(line, component);
  line.append("\",\"msg\":\"");
  AppendJsonEscaped(line, message);
  line.push_back('"');
  for (const LogField& field : fields) {
    line.append(",\"");
    AppendJsonEscaped(line, field.key);
    line.append("\":\"");
    AppendJsonEscaped(line, field.value);
    line.push_back('"');
  }
  line.append("}\n");
  return line;
}

std::string TextLine(absl::string_view ts, LogLevel l,
                     absl::string_view component, absl::string_view message,
                     absl::Span<const LogField> fields) {
  std::string line = absl::StrCat(ts, " ", absl::AsciiStrToUpper(LevelName(l)),
                                  " ", component, ": ");
  AppendTextEscaped(line, message);
  for (const LogField& field : fields) {
    absl::StrAppend(&line, " ", field.key, "=");
    AppendTextEscaped(line, field.value);
  }
  line.push_back('\n');
  return line;
}

void WriteLine(LogLevel l, absl::string_view component,
               absl::string_view message, absl::Span<const LogField> fields) {
  absl::Time (*now)() = clock_fn.load();
  const std::string ts = absl::FormatTime(
      "%Y-%m-%dT%H:%M:%E6SZ", now ? now() : absl::Now(), absl::UTCTimeZone());
  const std::string line = GetLogFormat() == LogFormat::kText
                               ? TextLine(ts, l, component, message, fields)
                               : JsonLine(ts, l, component, message, fields);
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

void SetLogFormat(LogFormat f) { format.store(static_cast<int>(f)); }

LogFormat GetLogFormat() { return static_cast<LogFormat>(format.load()); }

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  if (name == "json") return LogFormat::kJson;
  if (name == "text") return LogFormat::kText;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log format \"", name, "\" (json or text)"));
}

void SetLogClockForTesting(absl::Time (*now)()) { clock_fn.store(now); }

void Log(LogLevel l, absl::string_view component, absl::string_view message,
         absl::Span<const LogField> fields) {
  if (static_cast<int>(l) < level.load()) return;
  WriteLine(l, component, message, fields);
}

void LogAnnouncement(absl::string_view component, absl::string_view event,
                     absl::string_view message,
                     absl::Span<const LogField> fields) {
  std::vector<LogField> all;
  all.reserve(fields.size() + 1);
  all.push_back({"event", std::string(event)});
  all.insert(all.end(), fields.begin(), fields.end());
  WriteLine(LogLevel::kInfo, component, message, all);
}

}  // namespace dedup
