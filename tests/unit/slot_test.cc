// common/slot.h against the vectors every client shares
// (tests/vectors/slot.json), and the properties routing relies on.
#include "common/slot.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dedup {
namespace {

using nlohmann::json;

json LoadVectors() {
  std::ifstream in(SLOT_VECTORS);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

TEST(SlotVectorsTest, MatchesEverySharedVector) {
  const json vectors = LoadVectors().at("vectors");
  ASSERT_GE(vectors.size(), 40u);
  for (const json& v : vectors) {
    const std::string ns = v.at("namespace");
    const std::string key = v.at("key");
    SCOPED_TRACE("namespace '" + ns + "' key '" + key + "'");
    EXPECT_EQ(SlotOf(ns, key), v.at("slot").get<uint32_t>());
  }
}

// The vectors are worth sharing only if they cover what the other languages
// get wrong first: the size limits, both ends of the slot range.
TEST(SlotVectorsTest, CoverTheEdges) {
  std::set<size_t> ns_sizes, key_sizes;
  std::set<uint32_t> slots;
  const json vectors = LoadVectors().at("vectors");
  for (const json& v : vectors) {
    ns_sizes.insert(v.at("namespace").get<std::string>().size());
    key_sizes.insert(v.at("key").get<std::string>().size());
    slots.insert(v.at("slot").get<uint32_t>());
  }
  EXPECT_EQ(*ns_sizes.begin(), 1u);
  EXPECT_EQ(*ns_sizes.rbegin(), 128u);
  EXPECT_EQ(*key_sizes.begin(), 1u);
  EXPECT_EQ(*key_sizes.rbegin(), 255u);
  EXPECT_EQ(*slots.begin(), 0u);
  EXPECT_EQ(*slots.rbegin(), kSlotCount - 1);
}

// The separator keeps ("ab", "c") and ("a", "bc") apart.
TEST(SlotTest, NamespaceAndKeyAreSeparated) {
  EXPECT_NE(SlotOf("ab", "c"), SlotOf("a", "bc"));
}

}  // namespace
}  // namespace dedup
