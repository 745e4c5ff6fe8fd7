#include "client/uuid.h"

#include <random>
#include <regex>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "gtest/gtest.h"

namespace dedup {
namespace {

TEST(UuidTest, IsVersion4WithRfc4122Variant) {
  const std::regex pattern(
      "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
  for (int i = 0; i < 200; ++i) {
    const std::string uuid = NewUuidV4();
    EXPECT_TRUE(std::regex_match(uuid, pattern)) << uuid;
  }
}

TEST(UuidTest, DistinctAcrossCalls) {
  absl::flat_hash_set<std::string> seen;
  for (int i = 0; i < 10000; ++i) {
    EXPECT_TRUE(seen.insert(NewUuidV4()).second);
  }
}

TEST(UuidTest, DeterministicForASeededGenerator) {
  std::mt19937_64 a(42);
  std::mt19937_64 b(42);
  EXPECT_EQ(NewUuidV4(a), NewUuidV4(b));
}

}  // namespace
}  // namespace dedup
