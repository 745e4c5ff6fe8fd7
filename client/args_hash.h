// The canonical args_hash every dedup client computes:
//
//   args_hash = SHA-256(UTF-8 bytes of the RFC 8785 (JCS) canonical JSON of
//                       the tool arguments), 32 raw bytes.
//
// Two calls with equal arguments (as JSON values, whatever their key order,
// whitespace or number spelling) get the same hash in every client language;
// tests/vectors/args_hash.json pins the exact bytes.
//
// Canonical form (RFC 8785, i.e. what ECMAScript's JSON.stringify produces
// for the parsed value, with object keys sorted):
// - Object members sorted by their keys as UTF-16 code unit sequences (not by
//   UTF-8 bytes: the two orders differ for U+E000..U+FFFF vs. astral chars).
// - Numbers are IEEE-754 doubles written as ECMAScript Number::toString:
//   shortest round-trip digits, exponent form iff the decimal exponent is
//   >= 21 or <= -7 ("1e+21", "1e-7"), -0 written as 0. Integers that a double
//   cannot hold exactly round like doubles (9007199254740993 -> ...992).
// - Strings escape only '"', '\\' and U+0000..U+001F (\b \t \n \f \r short
//   forms, the rest \u00xx in lower case); everything else is literal UTF-8.
// - No whitespace.
//
// Rejected (InvalidArgument), so a hash never silently depends on a parser's
// choice: text that is not JSON, invalid UTF-8, lone surrogates (\ud800),
// duplicate object keys (RFC 8785 requires I-JSON, RFC 7493, which forbids
// them; parsers disagree on which duplicate wins), numbers outside the double
// range (1e400), NaN and infinities, and nesting deeper than
// kMaxCanonicalJsonDepth arrays/objects.
//
// Thread-safe (pure functions).
#ifndef DEDUP_CLIENT_ARGS_HASH_H_
#define DEDUP_CLIENT_ARGS_HASH_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace dedup {

// Deepest accepted nesting of arrays and objects (a top-level scalar is depth
// 0, "[]" depth 1). Bounds recursion; the Python client uses the same limit.
inline constexpr int kMaxCanonicalJsonDepth = 256;

// RFC 8785 canonical form of the JSON text `json_text` (UTF-8).
[[nodiscard]] absl::StatusOr<std::string> CanonicalJson(
    absl::string_view json_text);

// RFC 8785 canonical form of an already parsed value. Integers are converted
// to doubles first; strings must be valid UTF-8; binary values are rejected.
// (A distinct name, not an overload: a std::string argument would convert to
// both absl::string_view and nlohmann::json.)
[[nodiscard]] absl::StatusOr<std::string> CanonicalJsonOfValue(
    const nlohmann::json& value);

// SHA-256 of CanonicalJson(json_text): 32 raw bytes, ready for
// BeginRequest.args_hash.
[[nodiscard]] absl::StatusOr<std::string> ArgsHash(absl::string_view json_text);

// SHA-256 of CanonicalJsonOfValue(value): 32 raw bytes.
[[nodiscard]] absl::StatusOr<std::string> ArgsHashOfValue(
    const nlohmann::json& value);

// SHA-256 of `bytes` (32 raw bytes). Exposed for tests and for callers that
// canonicalize themselves.
[[nodiscard]] std::string Sha256(absl::string_view bytes);

}  // namespace dedup

#endif  // DEDUP_CLIENT_ARGS_HASH_H_
