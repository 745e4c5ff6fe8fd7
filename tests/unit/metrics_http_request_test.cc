#include "server/metrics_http_request.h"

#include <string>

#include "gtest/gtest.h"

namespace dedup {
namespace {

ParseResult Parse(const std::string& input) {
  return ParseHttpRequest(input, HttpLimits{});
}

TEST(MetricsHttpRequestTest, ParsesAScrape) {
  const std::string head =
      "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n"
      "Accept-Encoding: deflate, GZip;q=0.5\r\n"
      "authorization:  Bearer t  \r\n\r\n";
  const ParseResult r = Parse(head + "GET /next");
  ASSERT_EQ(r.state, ParseState::kComplete) << r.reason;
  EXPECT_EQ(r.consumed, head.size());  // the next request stays buffered
  EXPECT_EQ(r.request.method, "GET");
  EXPECT_EQ(r.request.path, "/metrics");
  EXPECT_EQ(r.request.minor_version, 1);
  EXPECT_TRUE(r.request.keep_alive);
  EXPECT_FALSE(r.request.has_body);
  EXPECT_TRUE(r.request.accepts_gzip);
  EXPECT_EQ(r.request.authorization, "Bearer t");
}

TEST(MetricsHttpRequestTest, ToleratesBareLfLeadingBlankLinesAndAbsoluteForm) {
  const ParseResult r =
      Parse("\r\n\nGET http://h:9464/metrics HTTP/1.0\nConnection: x\n\n");
  ASSERT_EQ(r.state, ParseState::kComplete) << r.reason;
  EXPECT_EQ(r.request.path, "/metrics");
  EXPECT_EQ(r.request.minor_version, 0);
  EXPECT_FALSE(r.request.keep_alive);  // HTTP/1.0
  EXPECT_FALSE(r.request.accepts_gzip);
}

TEST(MetricsHttpRequestTest, ConnectionCloseGzipRefusedAndBodies) {
  ParseResult r = Parse(
      "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Close\r\n"
      "Accept-Encoding: gzip;q=0\r\nContent-Length: 2\r\n\r\n");
  ASSERT_EQ(r.state, ParseState::kComplete) << r.reason;
  EXPECT_FALSE(r.request.keep_alive);
  EXPECT_FALSE(r.request.accepts_gzip);
  EXPECT_TRUE(r.request.has_body);
  r = Parse("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
  ASSERT_EQ(r.state, ParseState::kComplete) << r.reason;
  EXPECT_TRUE(r.request.has_body);
}

TEST(MetricsHttpRequestTest, IncompleteUntilTheBlankLine) {
  EXPECT_EQ(Parse("").state, ParseState::kIncomplete);
  EXPECT_EQ(Parse("GE").state, ParseState::kIncomplete);
  EXPECT_EQ(Parse("GET /metrics HTTP/1.1\r\nHost: a\r\n").state,
            ParseState::kIncomplete);
  EXPECT_EQ(Parse("GET /metrics HTTP/1.1\r\nHost: a\r\n\r").state,
            ParseState::kIncomplete);
}

TEST(MetricsHttpRequestTest, AnswersEachMalformedHeadPrecisely) {
  const struct {
    std::string input;
    int status;
  } cases[] = {
      {"\x16\x03\x01\x02", 400},  // TLS ClientHello: at once, no newline
      {"garbage\r\n\r\n", 400},
      {"GET  /metrics HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"GET metrics HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\n\r\n", 400},  // no Host
      {"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: a\r\nno colon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: a\r\nBad Name: v\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n"
       "Content-Length: 1\r\n\r\n",
       400},
      {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n"
       "Transfer-Encoding: chunked\r\n\r\n",
       400},
      {"GET / HTTP/1.x\r\n\r\n", 400},
      {"PRI * HTTP/2.0\r\n\r\n", 505},
      {"GET / HTTP/0.9\r\n\r\n", 505},
      {"GET /" + std::string(5000, 'a'), 414},
      {"GET /" + std::string(5000, 'a') + " HTTP/1.1\r\n\r\n", 414},
      {"GET / HTTP/1.1\r\nHost: a\r\nX: " + std::string(9000, 'b'), 431},
      {"GET / HTTP/1.1\r\nHost: a\r\nX: " + std::string(9000, 'b') + "\r\n\r\n",
       431},
  };
  for (const auto& c : cases) {
    const ParseResult r = Parse(c.input);
    EXPECT_EQ(r.state, ParseState::kError) << c.input.substr(0, 60);
    EXPECT_EQ(r.status, c.status) << c.input.substr(0, 60) << ": " << r.reason;
    EXPECT_FALSE(r.reason.empty());
  }
}

}  // namespace
}  // namespace dedup
