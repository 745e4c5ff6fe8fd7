#include "common/flag_syntax.h"

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace dedup {

absl::Status CheckFlagSyntax(int argc, char** argv) {
  // absl handles these itself; they are not registered flags.
  static const auto* const kUsageFlags = new absl::flat_hash_set<std::string>{
      "help",    "helpfull",         "helpshort", "helppackage",
      "version", "only_check_flags", "helpon",    "helpmatch"};
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (!absl::ConsumePrefix(&arg, "-") || arg.empty()) continue;  // positional
    absl::ConsumePrefix(&arg, "-");
    if (arg.empty()) break;  // "--": the rest is positional.
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    const bool has_value = eq != absl::string_view::npos;
    if (kUsageFlags->contains(name)) continue;

    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negated = false;
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      negated = flag != nullptr;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (flag->IsOfType<bool>()) {
      if (negated && has_value) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " takes no value"));
      }
      if (!has_value) continue;
    } else if (negated) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    absl::string_view value;
    if (has_value) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("missing value for --", name));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag->Name(), ": ", error));
    }
  }
  return absl::OkStatus();
}

}  // namespace dedup
