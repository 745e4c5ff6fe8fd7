// The HTTP/1.x requests of the metrics port (RFC 9112), parsed from the bytes
// a connection has received so far. Only what the port needs is kept: the
// method, the path, the headers that decide the answer. Bodies are not read.
#ifndef DEDUP_SERVER_METRICS_HTTP_REQUEST_H_
#define DEDUP_SERVER_METRICS_HTTP_REQUEST_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace dedup {

struct HttpLimits {
  // Bytes of the request line (method, target, version), without its CRLF.
  size_t max_request_line = 4096;
  // Bytes of the whole head: request line, header lines, final blank line.
  size_t max_head = 8192;
};

struct HttpRequest {
  std::string method;         // as sent (methods are case-sensitive)
  std::string path;           // the target's path: no query, no authority
  int minor_version = 1;      // HTTP/1.<minor_version>: 0 or 1
  bool keep_alive = true;     // HTTP/1.1 without "Connection: close"
  bool has_body = false;      // Content-Length > 0 or Transfer-Encoding
  bool accepts_gzip = false;  // Accept-Encoding lists gzip (q > 0)
  std::string authorization;  // the Authorization header's value, or ""
};

enum class ParseState { kIncomplete, kComplete, kError };

struct ParseResult {
  ParseState state = ParseState::kIncomplete;
  HttpRequest request;  // kComplete
  size_t consumed = 0;  // kComplete: bytes of the head (bodies are not read)
  int status = 0;       // kError: 400, 414, 431 or 505
  std::string reason;   // kError: what was wrong, for the answer's body
};

// Parses the request at the start of `input`. kIncomplete while the head may
// still become valid with more bytes; kError as soon as it cannot (so a
// non-HTTP client, e.g. a TLS handshake, is answered at once). Leading blank
// lines are skipped; lines may end in CRLF or a bare LF. Pure: thread-safe.
[[nodiscard]] ParseResult ParseHttpRequest(absl::string_view input,
                                           const HttpLimits& limits);

}  // namespace dedup

#endif  // DEDUP_SERVER_METRICS_HTTP_REQUEST_H_
