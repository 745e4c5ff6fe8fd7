#include "tests/testing/test_pki.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/tenants.h"
#include "tests/testing/server_process.h"

namespace dedup::testing {
namespace {

std::string HexDigestOf(const std::string& token) {
  std::string hex;
  for (unsigned char b : DigestOfToken(token)) {
    absl::StrAppendFormat(&hex, "%02x", b);
  }
  return hex;
}

}  // namespace

absl::StatusOr<std::string> MakeTestPki() {
  absl::StatusOr<std::string> dir = MakeTempDir("dedup-pki");
  if (!dir.ok()) return dir.status();
  absl::StatusOr<ProcessResult> made =
      RunProcess(DEDUP_TEST_PKI_SCRIPT, {*dir});
  if (!made.ok()) return made.status();
  if (made->exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("make-test-pki failed: ", made->output));
  }
  return *dir;
}

std::string StandardTenantsJson(bool with_billing_token) {
  return absl::StrCat(
      "{\"tenants\": [\n"
      "  {\"name\": \"billing\",\n"
      "   \"token_sha256\": [",
      with_billing_token ? absl::StrCat("\"", HexDigestOf(kBillingToken), "\"")
                         : "",
      "],\n"
      "   \"cert_sans\": [\"billing-tools\"],\n"
      "   \"namespace_prefixes\": [\"billing:\"], \"roles\": [\"client\"]},\n"
      "  {\"name\": \"ops\", \"token_sha256\": [\"",
      HexDigestOf(kOpsToken),
      "\"],\n"
      "   \"cert_sans\": [\"ops-console\"],\n"
      "   \"namespace_prefixes\": [\"\"], \"roles\": [\"operator\"]}\n"
      "]}\n");
}

std::string WithLimitedTenant(std::string tenants_json, const std::string& name,
                              const std::string& token,
                              const std::string& limits_json) {
  tenants_json.replace(
      tenants_json.rfind("]}"), 2,
      absl::StrCat(",\n  {\"name\": \"", name, "\", \"token_sha256\": [\"",
                   HexDigestOf(token), "\"], \"namespace_prefixes\": [\"", name,
                   ":\"], \"roles\": [\"client\"], \"limits\": ", limits_json,
                   "}\n]}"));
  return tenants_json;
}

void WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << text;
  }
  std::filesystem::rename(tmp, path);
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace dedup::testing
