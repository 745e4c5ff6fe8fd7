// The result convention every dedup helper shares (C++ RunOnce, TypeScript
// withIdempotency, Python with_idempotency): a stored outcome
// (CompleteRequest.result) is UTF-8 JSON text, so an outcome recorded by one
// language replays in every other.
//
// - SUCCESS: the compact JSON text of the value (no whitespace). Only the
//   value is portable, not the bytes: object key order and number spelling
//   differ between writers (nlohmann::json writes keys sorted, JavaScript
//   and Python in insertion order; 1.0 here, 1 in JavaScript), so readers
//   decode and compare values.
// - ERROR: {"name":"<kind>","message":"<text>","code":<string|number>}
//   compact, in that order, "code" only when there is one: the bytes the
//   TypeScript helper writes. (The Python helper writes the same object with
//   json.dumps' default ", " and ": " separators and no code.) Readers are
//   tolerant: a payload that is not a JSON object with a string "message"
//   (raw bytes, e.g. from ExecResult::PermanentError or dedupctl) reads as
//   name "Error" with the payload as message, in every language.
// - Raw bytes (ExecResult::Success(std::string)) remain the escape hatch for
//   results only C++ reads: the other helpers refuse to replay a SUCCESS
//   that is not JSON (TypeScript DedupProtocolError, Python ValueError).
//
// Thread-safe (pure functions).
#ifndef DEDUP_CLIENT_JSON_RESULT_H_
#define DEDUP_CLIENT_JSON_RESULT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace dedup {

// A permanent failure as the helpers store it.
struct StoredError {
  std::string name;     // The error's kind, e.g. "CardDeclined".
  std::string message;  // Human-readable text.
  // A string or a number; null when there is none. Other JSON types are
  // never stored (the TypeScript helper drops them too).
  nlohmann::json code;
};

// `value` as compact UTF-8 JSON text. Never fails: bytes of its strings that
// are not valid UTF-8 become U+FFFD, and NaN and infinities become null (as
// JSON.stringify writes them).
[[nodiscard]] std::string EncodeJsonResult(const nlohmann::json& value);

// `error` as {"name","message","code"?} JSON text (see the file comment);
// invalid UTF-8 as in EncodeJsonResult, and a code that is neither a string
// nor a number is left out.
[[nodiscard]] std::string EncodeStoredError(const StoredError& error);

// The value of a SUCCESS payload. INVALID_ARGUMENT when `payload` is not
// UTF-8 JSON text (raw bytes written by another tool), with a leading
// byte-order mark refused as the TypeScript and Python readers refuse it.
// Also refused, unlike in those readers: a string holding a lone surrogate
// escape ("\ud800"), which JSON.stringify writes for such a string.
[[nodiscard]] absl::StatusOr<nlohmann::json> DecodeJsonResult(
    absl::string_view payload);

// The error of an ERROR payload, read as tolerantly as the other helpers
// read it: a JSON object with a string "message" gives its name (else
// "Error"), message and code (kept only when a string or a number); any
// other payload gives name "Error" and the payload itself as message.
[[nodiscard]] StoredError DecodeStoredError(absl::string_view payload);

}  // namespace dedup

#endif  // DEDUP_CLIENT_JSON_RESULT_H_
