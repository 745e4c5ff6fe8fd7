#include "client/json_result.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dedup {
namespace {

using nlohmann::json;

// Compact, UTF-8 kept literal (as JSON.stringify and Python's
// ensure_ascii=False write it), invalid UTF-8 replaced rather than thrown.
std::string Dump(const json& value) {
  return value.dump(/*indent=*/-1, /*indent_char=*/' ',
                    /*ensure_ascii=*/false, json::error_handler_t::replace);
}

bool IsStorableCode(const json& code) {
  return code.is_string() || code.is_number();
}

}  // namespace

std::string EncodeJsonResult(const json& value) { return Dump(value); }

std::string EncodeStoredError(const StoredError& error) {
  // Written by hand, not from a json object: nlohmann::json sorts keys, and
  // the TypeScript helper's bytes put name, message, code in this order.
  std::string text = absl::StrCat("{\"name\":", Dump(error.name),
                                  ",\"message\":", Dump(error.message));
  if (IsStorableCode(error.code)) {
    absl::StrAppend(&text, ",\"code\":", Dump(error.code));
  }
  text += '}';
  return text;
}

absl::StatusOr<json> DecodeJsonResult(absl::string_view payload) {
  // nlohmann skips a leading byte-order mark; JSON.parse and json.loads
  // refuse it, and a result must read the same in every language.
  if (absl::StartsWith(payload, "\xEF\xBB\xBF")) {
    return absl::InvalidArgumentError(
        "dedup: stored result starts with a byte-order mark: not JSON text");
  }
  json value = json::parse(payload.begin(), payload.end(), /*cb=*/nullptr,
                           /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dedup: stored result (", payload.size(),
                     " bytes) is not UTF-8 JSON text: raw bytes written by "
                     "ExecResult::Success or another tool?"));
  }
  return value;
}

StoredError DecodeStoredError(absl::string_view payload) {
  absl::StatusOr<json> parsed = DecodeJsonResult(payload);
  if (parsed.ok() && parsed->is_object()) {
    auto message = parsed->find("message");
    if (message != parsed->end() && message->is_string()) {
      StoredError error;
      auto name = parsed->find("name");
      error.name = name != parsed->end() && name->is_string()
                       ? name->get<std::string>()
                       : "Error";
      error.message = message->get<std::string>();
      auto code = parsed->find("code");
      if (code != parsed->end() && IsStorableCode(*code)) error.code = *code;
      return error;
    }
  }
  return StoredError{"Error", std::string(payload), nullptr};
}

}  // namespace dedup
