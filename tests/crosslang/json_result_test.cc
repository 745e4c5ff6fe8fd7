// The JSON result convention's C++ side (client/json_result.h): the bytes it
// writes and how tolerantly it reads. test_crosslang.py checks the same
// against the TypeScript and Python helpers through a real dedupd.
#include "client/json_result.h"

#include <cmath>

#include "client/run_once.h"
#include "gtest/gtest.h"

namespace dedup {
namespace {

using nlohmann::json;

TEST(EncodeStoredError, WritesTheTypeScriptHelpersBytes) {
  // JSON.stringify({name, message, code}) for the same values.
  EXPECT_EQ(
      EncodeStoredError({"CardDeclined", "no \"funds\" €", "E_FUNDS"}),
      R"({"name":"CardDeclined","message":"no \"funds\" €","code":"E_FUNDS"})");
  EXPECT_EQ(EncodeStoredError({"Http", "teapot", 418}),
            R"({"name":"Http","message":"teapot","code":418})");
  EXPECT_EQ(EncodeStoredError({"E", "line\nctl\x01", nullptr}),
            R"({"name":"E","message":"line\nctl\u0001"})");
}

TEST(EncodeStoredError, LeavesOutACodeThatIsNeitherStringNorNumber) {
  EXPECT_EQ(EncodeStoredError({"E", "m", json::array({1})}),
            R"({"name":"E","message":"m"})");
  EXPECT_EQ(EncodeStoredError({"E", "m", true}),
            R"({"name":"E","message":"m"})");
}

TEST(EncodeJsonResult, IsCompactUtf8AndNeverThrows) {
  EXPECT_EQ(EncodeJsonResult(json{{"b", {1, 2.5, nullptr}}, {"a", "Zoë 🚀"}}),
            R"({"a":"Zoë 🚀","b":[1,2.5,null]})");
  // Invalid UTF-8 is replaced, NaN written as JSON.stringify writes it.
  EXPECT_EQ(EncodeJsonResult(json("a\xff")), "\"a\xEF\xBF\xBD\"");
  EXPECT_EQ(EncodeJsonResult(json(std::nan(""))), "null");
}

TEST(DecodeJsonResult, ReadsJsonAndRefusesRawBytes) {
  absl::StatusOr<json> value = DecodeJsonResult(R"( {"a": [1, 2.5e3, "ü"]} )");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, (json{{"a", {1, 2500.0, "ü"}}}));
  EXPECT_EQ(DecodeJsonResult("inv-981").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeJsonResult("\"a\xff\"").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeJsonResult("").status().code(),
            absl::StatusCode::kInvalidArgument);
  // JSON.parse and json.loads refuse a byte-order mark; nlohmann alone
  // would skip it.
  EXPECT_EQ(DecodeJsonResult("\xEF\xBB\xBF{}").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DecodeStoredError, ReadsEveryHelpersFormTolerantly) {
  StoredError ts = DecodeStoredError(
      R"({"name":"CardDeclined","message":"no","code":"E_FUNDS"})");
  EXPECT_EQ(ts.name, "CardDeclined");
  EXPECT_EQ(ts.message, "no");
  EXPECT_EQ(ts.code, json("E_FUNDS"));
  // Python's json.dumps separators, no code.
  StoredError py =
      DecodeStoredError(R"({"name": "ValueError", "message": "bad"})");
  EXPECT_EQ(py.name, "ValueError");
  EXPECT_EQ(py.message, "bad");
  EXPECT_TRUE(py.code.is_null());
  // No string name: "Error"; a code of another type is dropped.
  StoredError odd = DecodeStoredError(R"({"name":7,"message":"m","code":[1]})");
  EXPECT_EQ(odd.name, "Error");
  EXPECT_TRUE(odd.code.is_null());
  // Not such an object (raw bytes, dedupctl): the payload is the message.
  for (const char* raw : {"declined", R"({"error":"x"})", "[1]", "\xff"}) {
    StoredError error = DecodeStoredError(raw);
    EXPECT_EQ(error.name, "Error") << raw;
    EXPECT_EQ(error.message, raw);
    EXPECT_TRUE(error.code.is_null());
  }
}

TEST(RunResult, DecodesByOutcome) {
  RunResult success;
  success.outcome = v1::SUCCESS;
  success.result = ExecResult::SuccessJson(json{{"id", 7}}).payload;
  ASSERT_TRUE(success.ResultJson().ok());
  EXPECT_EQ(*success.ResultJson(), (json{{"id", 7}}));
  EXPECT_FALSE(success.ResultError().has_value());

  RunResult error;
  error.outcome = v1::ERROR;
  error.result = ExecResult::PermanentErrorJson("Declined", "no", 402).payload;
  EXPECT_EQ(error.result, R"({"name":"Declined","message":"no","code":402})");
  EXPECT_EQ(error.ResultJson().status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(error.ResultError().has_value());
  EXPECT_EQ(error.ResultError()->name, "Declined");
  EXPECT_EQ(error.ResultError()->code, json(402));

  // The raw escape hatch is unchanged.
  EXPECT_EQ(ExecResult::Success("raw\x01").payload, "raw\x01");
  EXPECT_EQ(ExecResult::PermanentError("oops").payload, "oops");
}

}  // namespace
}  // namespace dedup
