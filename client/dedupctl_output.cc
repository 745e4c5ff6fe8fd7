#include "client/dedupctl_output.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"

namespace dedup::ctl {

absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view name) {
  if (name == "text") return OutputFormat::kText;
  if (name == "json") return OutputFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("-o/--output must be text or json, not '", name, "'"));
}

OutputFormat OutputFormatInArgs(int argc, char** argv) {
  OutputFormat format = OutputFormat::kText;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "-")) continue;
    absl::ConsumePrefix(&arg, "-");
    absl::string_view value;
    if (arg == "o" || arg == "output") {
      if (i + 1 >= argc) break;
      value = argv[++i];
    } else if (absl::ConsumePrefix(&arg, "o=") ||
               absl::ConsumePrefix(&arg, "output=")) {
      value = arg;
    } else {
      continue;
    }
    // Any request for JSON counts: a script that asked for it parses stderr.
    if (value == "json") format = OutputFormat::kJson;
  }
  return format;
}

nlohmann::json ProtoToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  // Every field, so a script reads 0 and false instead of a missing key.
  options.always_print_primitive_fields = true;
  std::string text;
  const auto status =
      google::protobuf::util::MessageToJsonString(message, &text, options);
  // Only a message holding an Any of an unknown type fails; dedup.v1 has
  // none, so this is a programming error worth a visible marker.
  if (!status.ok()) return {{"jsonError", status.ToString()}};
  return nlohmann::json::parse(text);
}

void PrintJson(std::ostream& out, const nlohmann::json& document) {
  out << document.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false,
                       nlohmann::json::error_handler_t::replace)
      << "\n";
}

void PrintJson(std::ostream& out, const google::protobuf::Message& message) {
  PrintJson(out, ProtoToJson(message));
}

nlohmann::json StatusToJson(const absl::Status& status) {
  return {{"code", absl::StatusCodeToString(status.code())},
          {"message", std::string(status.message())}};
}

int PrintError(OutputFormat format, std::ostream& err,
               const absl::Status& status, int exit_code) {
  if (format == OutputFormat::kJson) {
    PrintJson(err, nlohmann::json{{"error", StatusToJson(status)}});
  } else {
    err << "dedupctl: " << status.ToString() << "\n";
  }
  return exit_code;
}

}  // namespace dedup::ctl
