// What the test-process helpers share between their files.
#ifndef DEDUP_TESTS_TESTING_PROCESS_OUTPUT_H_
#define DEDUP_TESTS_TESTING_PROCESS_OUTPUT_H_

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"

namespace dedup::testing {

// How long a dedupd (or a test group's leader election) may take to start.
inline constexpr std::chrono::seconds kServerStartTimeout(20);

// The last part of a process's output, enough to explain a failure.
inline std::string OutputTail(const std::string& output) {
  constexpr size_t kMax = 4000;
  if (output.size() <= kMax) return output;
  return absl::StrCat("...", output.substr(output.size() - kMax));
}

}  // namespace dedup::testing

#endif  // DEDUP_TESTS_TESTING_PROCESS_OUTPUT_H_
