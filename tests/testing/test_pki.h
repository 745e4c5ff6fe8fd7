// Certificates and tenants files for the TLS and authentication tests of
// every suite: certificates come from tests/testing/make-test-pki (openssl,
// at test time), tenants files from StandardTenantsJson.
#ifndef DEDUP_TESTS_TESTING_TEST_PKI_H_
#define DEDUP_TESTS_TESTING_TEST_PKI_H_

#include <string>

#include "absl/status/statusor.h"

namespace dedup::testing {

// Tokens of the standard tenants.
inline constexpr char kBillingToken[] = "billing-token-5f1c";
inline constexpr char kOpsToken[] = "ops-token-9a7e";

// Runs make-test-pki into a fresh temp dir (the caller removes it); see the
// script for the files it makes.
[[nodiscard]] absl::StatusOr<std::string> MakeTestPki();

// Two tenants: "billing" (kBillingToken unless `with_billing_token` is
// false, certificate name billing-tools, namespaces "billing:", client) and
// "ops" (kOpsToken, ops-console, every namespace, operator).
[[nodiscard]] std::string StandardTenantsJson(bool with_billing_token = true);

// `tenants_json` (say StandardTenantsJson()) with one more tenant: `name`
// with `token`, the namespaces "<name>:", role client, and `limits_json`
// as its limits (e.g. R"({"rps": 5})").
[[nodiscard]] std::string WithLimitedTenant(std::string tenants_json,
                                            const std::string& name,
                                            const std::string& token,
                                            const std::string& limits_json);

// Writes `text` beside `path` and renames it into place, so a server that
// watches the file never reads half of it.
void WriteFileAtomically(const std::string& path, const std::string& text);

// The whole file, or "" when it cannot be read.
[[nodiscard]] std::string ReadWholeFile(const std::string& path);

}  // namespace dedup::testing

#endif  // DEDUP_TESTS_TESTING_TEST_PKI_H_
