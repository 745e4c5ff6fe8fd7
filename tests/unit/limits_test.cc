#include "server/limits.h"

#include <string>

#include "gtest/gtest.h"

namespace dedup {
namespace {

v1::BeginRequest ValidBegin() {
  v1::BeginRequest r;
  r.set_namespace_("client:send_invoice");
  r.set_key("order-123");
  r.set_args_hash(std::string(32, 'h'));
  r.set_owner("4f1c7a2e-0000-4000-8000-000000000000");
  return r;
}

// Asserts INVALID_ARGUMENT whose message starts with "<field>:".
void ExpectRejected(const absl::Status& s, const std::string& field) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message().substr(0, field.size() + 1), field + ":") << s;
}

TEST(LimitsTest, DefaultsAreCoherentAndAValidBeginPasses) {
  Limits limits;
  EXPECT_TRUE(limits.Check().ok());
  EXPECT_TRUE(ValidateBegin(ValidBegin(), limits).ok());
}

// A retention past 2^40 ms would not fit a replicated Complete's log entry:
// followers would stop on it, so the flag refuses it at start-up.
TEST(LimitsTest, TombstoneRetentionIsAtMostAYear) {
  Limits limits;
  limits.tombstone_retention_s = Limits::kMaxTombstoneRetentionS;
  EXPECT_TRUE(limits.Check().ok());
  EXPECT_LT(int64_t{Limits::kMaxTombstoneRetentionS} * 1000, int64_t{1} << 40);
  limits.tombstone_retention_s = Limits::kMaxTombstoneRetentionS + 1;
  ExpectRejected(limits.Check(), "tombstone_retention_s");
  limits.tombstone_retention_s = 1'000'000'000;
  ExpectRejected(limits.Check(), "tombstone_retention_s");
}

TEST(LimitsTest, KeyRules) {
  Limits limits;
  v1::BeginRequest r = ValidBegin();
  r.set_key("");
  ExpectRejected(ValidateBegin(r, limits), "key");
  r.set_key(std::string(255, 'k'));
  EXPECT_TRUE(ValidateBegin(r, limits).ok());
  r.set_key(std::string(256, 'k'));
  ExpectRejected(ValidateBegin(r, limits), "key");
  for (const char* bad : {"a\nb", "tab\there", "\x01", "caf\xc3\xa9", "\x7f"}) {
    r.set_key(bad);
    ExpectRejected(ValidateBegin(r, limits), "key");
  }
  r.set_key("with space ~!@#$%^&*()");
  EXPECT_TRUE(ValidateBegin(r, limits).ok());
}

TEST(LimitsTest, NamespaceRules) {
  Limits limits;
  v1::BeginRequest r = ValidBegin();
  for (const std::string& bad :
       {std::string(), std::string(129, 'n'), std::string("a b"),
        std::string("a*b"), std::string("ns\0x", 4)}) {
    r.set_namespace_(bad);
    ExpectRejected(ValidateBegin(r, limits), "namespace");
  }
  r.set_namespace_("Az09._:/-");
  EXPECT_TRUE(ValidateBegin(r, limits).ok());
}

TEST(LimitsTest, SizesAndRanges) {
  Limits limits;
  v1::BeginRequest r = ValidBegin();
  r.set_args_hash(std::string(65, 'x'));
  ExpectRejected(ValidateBegin(r, limits), "args_hash");
  r = ValidBegin();
  r.set_owner(std::string(129, 'o'));
  ExpectRejected(ValidateBegin(r, limits), "owner");
  r = ValidBegin();
  r.set_ttl_s(30 * 24 * 3600 + 1);
  ExpectRejected(ValidateBegin(r, limits), "ttl_s");
  r = ValidBegin();
  r.set_lease_ms(99);
  ExpectRejected(ValidateBegin(r, limits), "lease_ms");
  r.set_lease_ms(3600 * 1000 + 1);
  ExpectRejected(ValidateBegin(r, limits), "lease_ms");
  r = ValidBegin();
  r.set_wait_ms(60'001);
  ExpectRejected(ValidateBegin(r, limits), "wait_ms");

  v1::CompleteRequest c;
  c.set_namespace_("ns");
  c.set_key("k");
  c.set_fence(1);
  c.set_outcome(v1::SUCCESS);
  c.set_result(std::string(limits.max_result_bytes, 'r'));
  EXPECT_TRUE(ValidateComplete(c, limits).ok());
  c.set_result(std::string(limits.max_result_bytes + 1, 'r'));
  ExpectRejected(ValidateComplete(c, limits), "result");
  c.set_result("");
  c.set_fence(0);
  ExpectRejected(ValidateComplete(c, limits), "fence");
  c.set_fence(1);
  c.set_outcome(v1::OUTCOME_UNSPECIFIED);
  ExpectRejected(ValidateComplete(c, limits), "outcome");
}

TEST(LimitsTest, IncoherentLimitsAreRefused) {
  Limits limits;
  limits.max_namespace_bytes = 300;
  EXPECT_FALSE(limits.Check().ok());
  limits = Limits();
  limits.default_lease_ms = 50;
  EXPECT_FALSE(limits.Check().ok());
}

}  // namespace
}  // namespace dedup
