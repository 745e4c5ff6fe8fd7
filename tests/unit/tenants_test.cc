// The tenants file: parsing, the errors that name a line, credential lookup
// and namespace prefixes; and which addresses count as loopback.
#include "server/tenants.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/lined_json.h"
#include "server/loopback_address.h"
#include "server/security_config.h"

namespace dedup {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string HexOf(const TokenDigest& d) {
  std::string hex;
  for (unsigned char b : d) absl::StrAppendFormat(&hex, "%02x", b);
  return hex;
}

const std::string kTwoTenants = absl::StrFormat(
    R"({"tenants": [
  {"name": "billing", "token_sha256": ["%s", "%s"],
   "namespace_prefixes": ["billing:", "invoices:"], "roles": ["client"],
   "limits": {"rps": 1000, "inflight": 256, "stored_bytes": 1073741824}},
  {"name": "ops", "cert_sans": ["ops-console", "spiffe://corp/ops"],
   "namespace_prefixes": [""], "roles": ["operator"]}
]})",
    HexOf(DigestOfToken("t1")),
    absl::AsciiStrToUpper(HexOf(DigestOfToken("t2"))));

TEST(TenantsTest, ParsesTenantsAndFindsThemByCredential) {
  absl::StatusOr<TenantTable> table = TenantTable::Parse(kTwoTenants);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->tenants().size(), 2u);
  const Tenant& billing = table->tenants()[0];
  EXPECT_EQ(billing.limits.rps, 1000u);
  EXPECT_EQ(billing.limits.inflight, 256u);
  EXPECT_EQ(billing.limits.stored_bytes, 1073741824u);
  EXPECT_EQ(table->FindByToken("t1"), &billing);
  EXPECT_EQ(table->FindByToken("t2"), &billing);  // upper-case hex too
  EXPECT_EQ(table->FindByToken("t3"), nullptr);
  EXPECT_EQ(table->FindByToken(""), nullptr);
  EXPECT_EQ(table->FindBySan({"x", "spiffe://corp/ops"}), &table->tenants()[1]);
  EXPECT_EQ(table->FindBySan({"ops"}), nullptr);

  EXPECT_TRUE(billing.AllowsNamespace("billing:eu"));
  EXPECT_TRUE(billing.AllowsNamespace("invoices:"));
  EXPECT_FALSE(billing.AllowsNamespace("billing"));
  EXPECT_FALSE(billing.AllowsNamespace("ops:billing:"));
  EXPECT_TRUE(table->tenants()[1].AllowsNamespace("anything"));

  EXPECT_TRUE(billing.HasRole(TenantRole::kClient));
  EXPECT_FALSE(billing.HasRole(TenantRole::kOperator));
  EXPECT_TRUE(table->tenants()[1].HasRole(TenantRole::kClient));
  EXPECT_TRUE(table->tenants()[1].HasRole(TenantRole::kOperator));
}

// Each bad file is refused with the line and the field at fault.
TEST(TenantsTest, ErrorsNameTheLineAndTheField) {
  const std::string token = HexOf(DigestOfToken("t"));
  const struct {
    std::string text;
    std::string error;
  } cases[] = {
      {"{\"tenants\": [\n  {\"name\": \"a\",,}]}", "line 2"},
      {"[]", "(top level): must be an object"},
      {"{\"tenant\": []}", "line 1: (top level): unknown key \"tenant\""},
      {"{\"tenants\": [\n {\"name\": \"a\",\n  \"roles\": [\"client\"]}]}",
       "line 2: tenants[0]: has no credential"},
      {"{\"tenants\": [{\"name\": \"a\", \"roles\": [\"client\"],\n"
       " \"token_sha256\": [\"abc\"]}]}",
       "line 2: tenants[0].token_sha256[0]: must be 64 hex digits"},
      {"{\"tenants\": [{\"name\": \"a\", \"roles\": [\"client\"],\n"
       " \"token_sha256\": [\"" +
           std::string(63, 'a') + "g\"]}]}",
       "line 2: tenants[0].token_sha256[0]: must be hex digits, found 'g'"},
      {"{\"tenants\": [{\"name\": \"a\", \"token_sha256\": [\"" + token +
           "\"],\n \"roles\": [\"client\",\n  \"admin\"]}]}",
       "line 3: tenants[0].roles[1]: unknown role \"admin\""},
      {"{\"tenants\": [{\"name\": \"a\", \"token_sha256\": [\"" + token +
           "\"],\n \"roles\": []}]}",
       "line 1: tenants[0]: has no role"},
      {"{\"tenants\": [{\"name\": \"a\", \"cert_sans\": [\"x\"],\n"
       " \"roles\": [\"client\"], \"namespace_prefix\": [\"a:\"]}]}",
       "line 2: tenants[0]: unknown key \"namespace_prefix\""},
      {"{\"tenants\": [{\"name\": \"a\", \"cert_sans\": [\"x\"], \"roles\": "
       "[\"client\"],\n \"limits\": {\"rps\": -5}}]}",
       "line 2: tenants[0].limits.rps: must be a whole number"},
      {"{\"tenants\": [{\"name\": \"a\", \"cert_sans\": [\"x\"], \"roles\": "
       "[\"client\"]},\n {\"name\": \"b\", \"cert_sans\": [\"x\"], \"roles\": "
       "[\"client\"]}]}",
       "line 2: tenants[1]: its cert_san is also in tenant \"a\""},
      {"{\"tenants\": [{\"name\": \"a\", \"token_sha256\": [\"" + token +
           "\"], \"roles\": [\"client\"]},\n {\"name\": \"b\", "
           "\"token_sha256\": [\"" +
           token + "\"], \"roles\": [\"client\"]}]}",
       "line 2: tenants[1]: its token_sha256 is also in tenant \"a\""},
      {"{\"tenants\": [{\"name\": \"a\", \"name\": \"b\"}]}",
       "line 1: key \"name\" appears twice"},
      {"{\"tenants\": [{\"name\": 7, \"cert_sans\": [\"x\"]}]}",
       "tenants[0].name: must be a string, got a number"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<TenantTable> table = TenantTable::Parse(c.text);
    ASSERT_FALSE(table.ok()) << c.text;
    EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(table.status().message()), HasSubstr(c.error))
        << c.text;
  }
}

TEST(LinedJsonTest, ValuesKnowTheirLines) {
  absl::StatusOr<LinedJson> json =
      ParseLinedJson("{\n \"a\": 1,\n \"b\": [\n  true,\n  \"x\"\n ]\n}\n");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->line, 1);
  ASSERT_NE(json->Find("a"), nullptr);
  EXPECT_EQ(json->Find("a")->line, 2);
  EXPECT_EQ(json->Find("a")->integer, 1u);
  const LinedJson* b = json->Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->line, 3);
  ASSERT_EQ(b->items.size(), 2u);
  EXPECT_EQ(b->items[0].line, 4);
  EXPECT_EQ(b->items[1].line, 5);
  EXPECT_EQ(json->member_lines, (std::vector<int>{2, 3}));
  EXPECT_THAT(
      std::string(ParseLinedJson(std::string(100, '[')).status().message()),
      HasSubstr("nesting deeper than 64"));
}

TEST(SecurityConfigTest, LoopbackAddresses) {
  for (const char* a :
       {"127.0.0.1:50051", "127.0.0.3:0", "localhost:1", "[::1]:50051", "::1",
        "ipv4:127.0.0.1:5", "ipv6:[::1]:5", "[::ffff:127.0.0.2]:1"}) {
    const absl::StatusOr<bool> loopback = BindsOnlyLoopback(a, "--address");
    ASSERT_TRUE(loopback.ok()) << a << ": " << loopback.status();
    EXPECT_TRUE(*loopback) << a;
  }
  for (const char* a : {"0.0.0.0:50051", "[::]:50051", ":50051", "10.0.0.1:1",
                        "128.0.0.1:1", "[::ffff:10.0.0.1]:1", "unix:/tmp/s"}) {
    const absl::StatusOr<bool> loopback = BindsOnlyLoopback(a, "--address");
    ASSERT_TRUE(loopback.ok()) << a << ": " << loopback.status();
    EXPECT_FALSE(*loopback) << a;
  }
}

// Judged by what the host resolves to, not by how it is spelt: a name that
// merely starts with "127." does not resolve, and says so naming the flag.
TEST(SecurityConfigTest, UnresolvableHostIsAnErrorNamingTheFlag) {
  const absl::StatusOr<bool> loopback =
      BindsOnlyLoopback("127.0.0.1.invalid:50051", "--address");
  ASSERT_FALSE(loopback.ok());
  EXPECT_EQ(loopback.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(loopback.status().message()),
              HasSubstr("--address 127.0.0.1.invalid:50051: host "
                        "'127.0.0.1.invalid' does not resolve"));
}

}  // namespace
}  // namespace dedup
