#include "server/metrics_http_request.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dedup {
namespace {

// RFC 9110 token characters (methods and header names).
bool IsTchar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::StrContains("!#$%&'*+-.^_`|~", c);
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsTchar(c)) return false;
  }
  return true;
}

// Visible characters, spaces and tabs: no CR, LF, NUL or other controls.
bool IsFieldValue(absl::string_view s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return false;
  }
  return true;
}

ParseResult Error(int status, std::string reason) {
  ParseResult r;
  r.state = ParseState::kError;
  r.status = status;
  r.reason = std::move(reason);
  return r;
}

// The line starting at `pos` (without its LF, and without a CR before it);
// false when its LF has not arrived yet.
bool NextLine(absl::string_view input, size_t pos, absl::string_view* line,
              size_t* next) {
  const size_t lf = input.find('\n', pos);
  if (lf == absl::string_view::npos) return false;
  *line = input.substr(pos, lf - pos);
  if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
  *next = lf + 1;
  return true;
}

// Rejects early what can never become a request line: a method with
// non-token bytes (a TLS handshake, binary junk) is answered at once.
bool MethodPrefixOk(absl::string_view partial) {
  return partial.empty() || IsToken(partial.substr(0, partial.find(' ')));
}

// "GET /metrics HTTP/1.1" into `request`; 0 or the error status.
int ParseRequestLine(absl::string_view line, HttpRequest* request,
                     std::string* reason) {
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !IsToken(parts[0]) || parts[1].empty()) {
    *reason = "malformed request line (expected METHOD SP TARGET SP VERSION)";
    return 400;
  }
  const absl::string_view version = parts[2];
  if (version == "HTTP/1.1" || version == "HTTP/1.0") {
    request->minor_version = version.back() - '0';
  } else if (version.size() == 8 && absl::StartsWith(version, "HTTP/") &&
             IsDigit(version[5]) && version[6] == '.' && IsDigit(version[7])) {
    *reason = absl::StrCat(version, " not supported: use HTTP/1.1");
    return 505;
  } else {
    *reason = "malformed HTTP version";
    return 400;
  }
  absl::string_view target = parts[1];
  // Absolute form (http://host/path) names the authority too: keep the path.
  for (absl::string_view scheme : {"http://", "https://"}) {
    if (absl::StartsWithIgnoreCase(target, scheme)) {
      target.remove_prefix(scheme.size());
      const size_t slash = target.find('/');
      target = slash == absl::string_view::npos ? "/" : target.substr(slash);
    }
  }
  if (target != "*" && target.front() != '/') {
    *reason = "malformed request target";
    return 400;
  }
  if (!IsFieldValue(target)) {
    *reason = "control characters in the request target";
    return 400;
  }
  request->method = std::string(parts[0]);
  request->path = std::string(target.substr(0, target.find('?')));
  return 0;
}

bool ListsToken(absl::string_view list, absl::string_view token) {
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    std::vector<absl::string_view> params = absl::StrSplit(item, ';');
    if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(params[0]), token)) {
      continue;
    }
    bool refused = false;  // "gzip;q=0"
    for (size_t i = 1; i < params.size(); ++i) {
      absl::string_view p = absl::StripAsciiWhitespace(params[i]);
      double q = 1;
      if (absl::StartsWithIgnoreCase(p, "q=") &&
          absl::SimpleAtod(p.substr(2), &q) && q <= 0) {
        refused = true;
      }
    }
    if (!refused) return true;
  }
  return false;
}

// What the header lines said, before they are checked together.
struct Fields {
  int hosts = 0;
  int content_lengths = 0;
  bool bad_content_length = false;
  bool transfer_encoding = false;
  bool connection_close = false;
};

// One "Name: value" line into `request`/`fields`; 0 or the error status.
int ParseHeaderLine(absl::string_view line, HttpRequest* request,
                    Fields* fields, std::string* reason) {
  if (line.front() == ' ' || line.front() == '\t') {
    *reason = "obsolete line folding in the headers";
    return 400;
  }
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos || !IsToken(line.substr(0, colon))) {
    *reason = "malformed header line (expected Name: value)";
    return 400;
  }
  const absl::string_view name = line.substr(0, colon);
  const absl::string_view value =
      absl::StripAsciiWhitespace(line.substr(colon + 1));
  if (!IsFieldValue(value)) {
    *reason = absl::StrCat("control characters in header ", name);
    return 400;
  }
  if (absl::EqualsIgnoreCase(name, "Host")) {
    ++fields->hosts;
  } else if (absl::EqualsIgnoreCase(name, "Content-Length")) {
    uint64_t length = 0;
    ++fields->content_lengths;
    if (value.empty() || !absl::c_all_of(value, IsDigit) ||
        !absl::SimpleAtoi(value, &length)) {
      fields->bad_content_length = true;
    }
    if (length > 0) request->has_body = true;
  } else if (absl::EqualsIgnoreCase(name, "Transfer-Encoding")) {
    fields->transfer_encoding = true;
  } else if (absl::EqualsIgnoreCase(name, "Connection")) {
    fields->connection_close |= ListsToken(value, "close");
  } else if (absl::EqualsIgnoreCase(name, "Accept-Encoding")) {
    request->accepts_gzip |= ListsToken(value, "gzip");
  } else if (absl::EqualsIgnoreCase(name, "Authorization")) {
    request->authorization = std::string(value);
  }
  return 0;
}

// Checks the header fields together once the head is complete.
int CheckFields(const Fields& fields, HttpRequest* request,
                std::string* reason) {
  if (request->minor_version == 1 && fields.hosts != 1) {
    *reason = "an HTTP/1.1 request needs exactly one Host header";
    return 400;
  }
  if (fields.bad_content_length || fields.content_lengths > 1 ||
      (fields.content_lengths > 0 && fields.transfer_encoding)) {
    *reason = "invalid Content-Length";
    return 400;
  }
  if (fields.transfer_encoding) request->has_body = true;
  request->keep_alive = request->minor_version == 1 && !fields.connection_close;
  return 0;
}

}  // namespace

ParseResult ParseHttpRequest(absl::string_view input,
                             const HttpLimits& limits) {
  size_t start = 0;  // blank lines before a request are ignored (RFC 9112)
  while (start < input.size() &&
         (input[start] == '\r' || input[start] == '\n')) {
    ++start;
  }
  absl::string_view line;
  size_t pos = start;
  if (!NextLine(input, start, &line, &pos)) {
    const absl::string_view partial = input.substr(start);
    if (!MethodPrefixOk(partial)) return Error(400, "not an HTTP request");
    if (partial.size() > limits.max_request_line) {
      return Error(414, "request line too long");
    }
    return ParseResult{};
  }
  if (line.size() > limits.max_request_line) {
    return Error(414, "request line too long");
  }
  ParseResult result;
  std::string reason;
  if (int status = ParseRequestLine(line, &result.request, &reason)) {
    return Error(status, std::move(reason));
  }
  Fields fields;
  for (;;) {
    if (!NextLine(input, pos, &line, &pos)) {
      if (input.size() - start > limits.max_head) {
        return Error(431, "request headers too large");
      }
      return ParseResult{};
    }
    if (pos - start > limits.max_head) {
      return Error(431, "request headers too large");
    }
    if (line.empty()) break;
    if (int status = ParseHeaderLine(line, &result.request, &fields, &reason)) {
      return Error(status, std::move(reason));
    }
  }
  if (int status = CheckFields(fields, &result.request, &reason)) {
    return Error(status, std::move(reason));
  }
  result.state = ParseState::kComplete;
  result.consumed = pos;
  return result;
}

}  // namespace dedup
