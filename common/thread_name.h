// Names the calling thread, so that `top -H`, `ps -L`, perf and
// /proc/PID/task/TID/comm tell dedupd's threads apart (a node runs dozens,
// and which of them a CPU quota starves is what an operator looks for).
//
// Thread-safe: names only the calling thread. Linux keeps at most 15
// bytes; longer names are cut. Threads it starts later inherit the name
// (libuv's file-system pool shows as the Raft loop that started it). Best
// effort: a failure is ignored.
#ifndef DEDUP_COMMON_THREAD_NAME_H_
#define DEDUP_COMMON_THREAD_NAME_H_

#include "absl/strings/string_view.h"

namespace dedup {

void NameThisThread(absl::string_view name);

}  // namespace dedup

#endif  // DEDUP_COMMON_THREAD_NAME_H_
