#include "client/args_hash.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dedup {
namespace {

using nlohmann::json;

std::string Hex(absl::string_view bytes) {
  return absl::BytesToHexString(bytes);
}

json LoadVectors() {
  std::ifstream in(ARGS_HASH_VECTORS);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

// Every shared vector, byte for byte: the canonical text and the hash.
TEST(ArgsHashVectorsTest, MatchesEverySharedVector) {
  const json vectors = LoadVectors().at("vectors");
  ASSERT_GE(vectors.size(), 12u);
  for (const json& v : vectors) {
    const std::string name = v.at("name");
    const std::string input = v.at("input");
    const std::string canonical = v.at("canonical");
    const std::string sha256 = v.at("sha256");
    SCOPED_TRACE(name);

    absl::StatusOr<std::string> got = CanonicalJson(input);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, canonical);

    absl::StatusOr<std::string> hash = ArgsHash(input);
    ASSERT_TRUE(hash.ok()) << hash.status();
    EXPECT_EQ(hash->size(), 32u);
    EXPECT_EQ(Hex(*hash), sha256);
    // The vector is self-consistent, and canonical text is a fixed point.
    EXPECT_EQ(Hex(Sha256(canonical)), sha256);
    EXPECT_EQ(CanonicalJson(canonical).value_or(""), canonical);
    // The parsed-value overload agrees with the text one.
    EXPECT_EQ(Hex(ArgsHashOfValue(json::parse(input)).value_or("")), sha256);
  }
}

std::string Canon(absl::string_view text) {
  absl::StatusOr<std::string> got = CanonicalJson(text);
  return got.ok() ? *got : absl::StrCat("error: ", got.status().message());
}

TEST(CanonicalJsonTest, NumbersFollowEcmaScriptToString) {
  EXPECT_EQ(Canon("1e16"), "10000000000000000");
  EXPECT_EQ(Canon("1e21"), "1e+21");
  EXPECT_EQ(Canon("123e-20"), "1.23e-18");
  EXPECT_EQ(Canon("-1e-7"), "-1e-7");
  EXPECT_EQ(Canon("1e-6"), "0.000001");
  EXPECT_EQ(Canon("0.30000000000000004"), "0.30000000000000004");
  EXPECT_EQ(Canon("5e-324"), "5e-324");
  EXPECT_EQ(Canon("1.7976931348623157e308"), "1.7976931348623157e+308");
  EXPECT_EQ(Canon("-0.0"), "0");
  EXPECT_EQ(Canon("333333333.33333329"), "333333333.3333333");
  EXPECT_EQ(Canon("18446744073709551615"), "18446744073709552000");
  EXPECT_EQ(Canon("-9223372036854775808"), "-9223372036854776000");
  EXPECT_EQ(Canon("123456789e-15"), "1.23456789e-7");
}

TEST(CanonicalJsonTest, KeysSortByUtf16CodeUnitsNotBytes) {
  // U+1F600 is D83D DE00 in UTF-16, which sorts before U+FB01; its UTF-8
  // (F0 ...) sorts after U+FB01's (EF ...).
  EXPECT_EQ(Canon(R"({"\ufb01":1,"\ud83d\ude00":2})"),
            "{\"\xF0\x9F\x98\x80\":2,\"\xEF\xAC\x81\":1}");
}

TEST(CanonicalJsonTest, SameKeyInSeparateObjectsIsFine) {
  EXPECT_EQ(Canon(R"([{"a":1},{"a":2}])"), R"([{"a":1},{"a":2}])");
}

TEST(CanonicalJsonTest, RejectsWhatHasNoSingleCanonicalForm) {
  const std::string bad[] = {
      "",
      "{",
      "[1,]",
      "1 2",
      "01",
      "/* c */ 1",
      "NaN",
      "Infinity",
      "-Infinity",
      "[1e400]",
      R"({"a":1,"a":2})",
      R"({"a":{"b":1,"b":1}})",
      R"("\ud800")",
      R"("\udc00x")",
      "\"\xFF\"",
      "\"\xED\xA0\x80\"",  // A surrogate encoded directly in UTF-8.
      "\"\xC0\xAF\"",      // Overlong '/'.
      "\"a\x01\"",         // Raw control character.
      "'single'",
      "\xEF\xBB\xBF{}",  // Byte order mark.
  };
  for (const std::string& text : bad) {
    SCOPED_TRACE(text);
    absl::StatusOr<std::string> got = CanonicalJson(text);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument)
        << (got.ok() ? *got : "");
    EXPECT_FALSE(ArgsHash(text).ok());
  }
}

TEST(CanonicalJsonTest, NestingIsBounded) {
  const auto nested = [](int depth) {
    return absl::StrCat(std::string(depth, '['), std::string(depth, ']'));
  };
  EXPECT_TRUE(CanonicalJson(nested(kMaxCanonicalJsonDepth)).ok());
  EXPECT_EQ(CanonicalJson(nested(kMaxCanonicalJsonDepth + 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Far deeper than the stack would allow if the parser recursed.
  EXPECT_FALSE(CanonicalJson(nested(1000000)).ok());
}

TEST(CanonicalJsonValueTest, ChecksWhatTheParserWouldHave) {
  EXPECT_EQ(CanonicalJsonOfValue(json(9007199254740993ULL)).value_or(""),
            "9007199254740992");
  EXPECT_FALSE(CanonicalJsonOfValue(json(std::nan(""))).ok());
  EXPECT_FALSE(
      CanonicalJsonOfValue(json(std::numeric_limits<double>::infinity())).ok());
  EXPECT_FALSE(CanonicalJsonOfValue(json("\xFF")).ok());
  EXPECT_FALSE(CanonicalJsonOfValue(json::object({{"\xFF", 1}})).ok());
  EXPECT_FALSE(CanonicalJsonOfValue(json::binary({1, 2})).ok());
  json deep = json::array();
  for (int i = 0; i < kMaxCanonicalJsonDepth; ++i) deep = json::array({deep});
  EXPECT_FALSE(CanonicalJsonOfValue(deep).ok());
}

TEST(Sha256Test, KnownDigest) {
  EXPECT_EQ(Hex(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace dedup
