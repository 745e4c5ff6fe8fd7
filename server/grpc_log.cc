#include "server/grpc_log.h"

#include <grpc/support/log.h>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace dedup {
namespace {

void ToOurLog(gpr_log_func_args* args) {
  const LogLevel level =
      args->severity == GPR_LOG_SEVERITY_ERROR  ? LogLevel::kError
      : args->severity == GPR_LOG_SEVERITY_INFO ? LogLevel::kInfo
                                                : LogLevel::kDebug;
  Log(level, "grpc",
      absl::StrCat(args->file, ":", args->line, ": ", args->message));
}

}  // namespace

void RouteGrpcLogs() { gpr_set_log_function(&ToOurLog); }

}  // namespace dedup
