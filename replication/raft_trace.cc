#include "replication/raft_trace.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace dedup {
namespace {

void Emit(struct raft_tracer* /*tracer*/, const char* file, int line,
          const char* message) {
  Log(LogLevel::kInfo, "raft", absl::StrCat(file, ":", line, ": ", message));
}

}  // namespace

struct raft_tracer* RaftLogTracer() {
  static struct raft_tracer tracer = {
      nullptr, std::getenv("LIBRAFT_TRACE") != nullptr, &Emit};
  return &tracer;
}

}  // namespace dedup
