// The power-off report as one JSON line (tests/powerfs/README.md).
#ifndef DEDUP_TESTS_POWERFS_REPORT_JSON_H_
#define DEDUP_TESTS_POWERFS_REPORT_JSON_H_

#include <string>

#include "journal.h"

namespace powerfs {

[[nodiscard]] std::string ReportJson(const PowerOffReport& report);

}  // namespace powerfs

#endif  // DEDUP_TESTS_POWERFS_REPORT_JSON_H_
