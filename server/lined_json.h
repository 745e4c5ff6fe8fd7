// JSON for configuration files whose errors must name a line.
//
// nlohmann::json parses the text, but its values do not remember where they
// were written; a configuration error like "tenants[2].roles[0]: unknown role
// 'admin'" is far easier to fix with "line 14" in front of it. ParseLinedJson
// builds a small tree in which every value carries the 1-based line where it
// is written (for an object or array: the line of its opening bracket;
// `member_lines` say where each member's key is written).
//
// Duplicate object keys are an error (the file would mean two things), and
// so is nesting deeper than 64 levels. Thread-safe (pure functions).
#ifndef DEDUP_SERVER_LINED_JSON_H_
#define DEDUP_SERVER_LINED_JSON_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dedup {

struct LinedJson {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  int line = 0;
  bool boolean = false;
  // kNumber: the value when it is an integer that fits (is_integer), else
  // only `number` is meaningful.
  double number = 0;
  bool is_integer = false;
  bool is_negative = false;
  uint64_t integer = 0;
  std::string string;
  std::vector<LinedJson> items;  // kArray
  // kObject, in file order; `first` is the key, `second.line` the value's.
  std::vector<std::pair<std::string, LinedJson>> members;
  std::vector<int> member_lines;  // line of each member's key

  // Null when absent or not an object.
  const LinedJson* Find(absl::string_view key) const;
  static absl::string_view TypeName(Type type);
};

// INVALID_ARGUMENT "line L, column C: <what>" for text that is not JSON.
[[nodiscard]] absl::StatusOr<LinedJson> ParseLinedJson(absl::string_view text);

// The errors of configuration files read as LinedJson, all INVALID_ARGUMENT
// "line L: <path>: <what>".
[[nodiscard]] absl::Status JsonErrorAt(const LinedJson& where,
                                       absl::string_view path,
                                       absl::string_view what);
// OK when `value` is of `type`; else "must be <type>, got <type>".
[[nodiscard]] absl::Status ExpectJsonType(const LinedJson& value,
                                          absl::string_view path,
                                          LinedJson::Type type);
// OK when every key of `object` is in `allowed`; else names the first
// unknown key and its line, and lists the allowed ones.
[[nodiscard]] absl::Status CheckJsonKeys(
    const LinedJson& object, absl::string_view path,
    const std::set<absl::string_view>& allowed);

}  // namespace dedup

#endif  // DEDUP_SERVER_LINED_JSON_H_
