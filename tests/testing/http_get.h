// A minimal HTTP/1.0 GET for tests that scrape dedupd's /metrics.
#ifndef DEDUP_TESTS_TESTING_HTTP_GET_H_
#define DEDUP_TESTS_TESTING_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"

namespace dedup::testing {

// GETs http://127.0.0.1:<port><path> and returns the body of a 200 answer
// (another answer: an error quoting its start, "bad HTTP answer: HTTP/1.1
// 401 ..."). `headers`: more header lines, each ending in "\r\n".
[[nodiscard]] absl::StatusOr<std::string> HttpGet(
    int port, const std::string& path, const std::string& headers = "");

// The value of the sample whose name-and-labels text is exactly `series`
// (e.g. `dedup_begin_total{outcome="started"}`) in Prometheus text format;
// NOT_FOUND when absent.
[[nodiscard]] absl::StatusOr<double> SampleValue(const std::string& exposition,
                                                 const std::string& series);

// The value of `series` on the /metrics page served at `port` (HttpGet,
// then SampleValue): the error of either when the scrape or the lookup fails.
[[nodiscard]] absl::StatusOr<double> ScrapeSample(int port,
                                                  const std::string& series);

}  // namespace dedup::testing

#endif  // DEDUP_TESTS_TESTING_HTTP_GET_H_
