// dedupctl's output formats: the human text of dedupctl_format.h, or one JSON
// document per command (-o json) for scripts. JSON follows the proto3 JSON
// mapping of dedup.v1 (lowerCamelCase names, enums by name, 64-bit integers
// as strings, bytes as base64) with every field present, defaults included,
// so a script never has to guess whether a missing field means 0.
//
// Errors: text "dedupctl: CODE: message" lines, or in JSON one object
// {"error":{"code":"NOT_FOUND","message":"..."}} on stderr; exit codes do
// not depend on the format. Thread-safe (pure functions over the streams
// given).
#ifndef DEDUP_CLIENT_DEDUPCTL_OUTPUT_H_
#define DEDUP_CLIENT_DEDUPCTL_OUTPUT_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"

namespace dedup::ctl {

enum class OutputFormat { kText, kJson };

// "text" or "json" (the values of -o / --output); INVALID_ARGUMENT otherwise.
[[nodiscard]] absl::StatusOr<OutputFormat> ParseOutputFormat(
    absl::string_view name);

// kJson when -o/--o/--output in `argv` (either spelling, with "=" or the
// next argument) asks for json anywhere, else kText. For reporting errors
// found before the flags are parsed.
[[nodiscard]] OutputFormat OutputFormatInArgs(int argc, char** argv);

// `message` in the JSON mapping described above, as a JSON value.
[[nodiscard]] nlohmann::json ProtoToJson(
    const google::protobuf::Message& message);

// Writes `document` as one line of compact JSON.
void PrintJson(std::ostream& out, const nlohmann::json& document);

// Writes `message` as one line of JSON (ProtoToJson).
void PrintJson(std::ostream& out, const google::protobuf::Message& message);

// {"code":"NOT_FOUND","message":"..."}: the status code's canonical name.
[[nodiscard]] nlohmann::json StatusToJson(const absl::Status& status);

// Reports `status` on `err`: "dedupctl: <status>" for kText, the error
// object for kJson. Returns `exit_code`, so a command can end with
// `return PrintError(...)`.
int PrintError(OutputFormat format, std::ostream& err,
               const absl::Status& status, int exit_code);

}  // namespace dedup::ctl

#endif  // DEDUP_CLIENT_DEDUPCTL_OUTPUT_H_
