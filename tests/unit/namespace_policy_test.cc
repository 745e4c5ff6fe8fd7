// The policy file: longest prefix, inheritance from the flags, and errors
// that name the line and field.
#include "server/namespace_policy.h"

#include "gtest/gtest.h"

namespace dedup {
namespace {

TEST(PolicyTableTest, LongestPrefixWinsAndUnsetFieldsKeepTheFlags) {
  Limits flags;
  absl::StatusOr<PolicyTable> t = PolicyTable::Parse(R"({"policies": [
    {"prefix": "", "name": "all", "max_ttl_s": 7200, "default_ttl_s": 3600},
    {"prefix": "a:", "default_ttl_s": 60, "on_error": "retry"},
    {"prefix": "a:b:", "name": "ab", "max_result_bytes": 5}]})",
                                                     flags);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), 3u);
  const EffectivePolicy ab = t->For("a:b:c");
  EXPECT_EQ(ab.name, "ab");
  EXPECT_EQ(ab.limits.max_result_bytes, 5u);
  EXPECT_EQ(ab.limits.default_ttl_s, flags.default_ttl_s);  // not a:'s
  EXPECT_FALSE(ab.retry_errors);
  const EffectivePolicy a = t->For("a:x");
  EXPECT_EQ(a.name, "a:");  // the prefix when unnamed
  EXPECT_EQ(a.limits.default_ttl_s, 60u);
  EXPECT_TRUE(a.retry_errors);
  EXPECT_EQ(t->For("zzz").name, "all");
  EXPECT_EQ(t->For("zzz").limits.max_ttl_s, 7200u);
  EXPECT_EQ(PolicyTable(flags).For("a:").name, "");
}

TEST(PolicyTableTest, ErrorsNameTheLineAndField) {
  const Limits flags;
  struct Case {
    const char* json;
    const char* error;
  } cases[] = {
      {"{\"policies\": [\n{\"prefix\": \"a\", \"max_ttl_s\": 0}]}",
       "line 2: policies[0].max_ttl_s: must be a whole number 1..31536000, "
       "got 0"},
      {"{\"policies\": [\n{\"prefix\": \"a\"},\n{\"prefix\": \"a\"}]}",
       "line 3: policies[1].prefix: prefix \"a\" already has a policy"},
      {"{\"policies\": [{\"name\": \"x\"}]}",
       "line 1: policies[0]: has no \"prefix\""},
      {"{\"policies\": [{\"prefix\": \"a\", \"on_error\": \"ignore\"}]}",
       "line 1: policies[0].on_error: must be \"replay\" or \"retry\", got "
       "\"ignore\""},
      {"{\"policies\": [{\"prefix\": \"a\", \"max_result_bytes\": 2000000}]}",
       "line 1: policies[0].max_result_bytes: must be a whole number "
       "0..1048576, got 2000000"},
      {"{\"polices\": []}", "line 1: (top level): unknown key \"polices\""},
  };
  for (const Case& c : cases) {
    absl::StatusOr<PolicyTable> t = PolicyTable::Parse(c.json, flags);
    ASSERT_FALSE(t.ok()) << c.json;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(t.status().message()).rfind(c.error, 0), 0u)
        << t.status().message() << "\n  wanted: " << c.error;
  }
}

TEST(PolicyTableTest, NamePolicyAppendsOnlyWhenAPolicyApplied) {
  EffectivePolicy none;
  EXPECT_EQ(NamePolicy(absl::InvalidArgumentError("ttl_s: x"), none).message(),
            "ttl_s: x");
  EffectivePolicy billing;
  billing.name = "billing";
  EXPECT_EQ(
      NamePolicy(absl::InvalidArgumentError("ttl_s: x"), billing).message(),
      "ttl_s: x (policy \"billing\")");
  EXPECT_TRUE(NamePolicy(absl::OkStatus(), billing).ok());
}

}  // namespace
}  // namespace dedup
