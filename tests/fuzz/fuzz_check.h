// FUZZ_CHECK: the fuzz targets' assertion. A failure prints the condition and
// aborts, so libFuzzer reports a crash and saves the input that caused it.
// (assert() would vanish in an NDEBUG build.)
#ifndef DEDUP_TESTS_FUZZ_FUZZ_CHECK_H_
#define DEDUP_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                               \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, \
                   __LINE__, #cond);                                   \
      std::abort();                                                    \
    }                                                                  \
  } while (0)

#endif  // DEDUP_TESTS_FUZZ_FUZZ_CHECK_H_
