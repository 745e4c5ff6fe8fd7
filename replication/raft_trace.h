// libraft's trace messages, in dedupd's log. libraft writes them to stderr
// itself ("LIBRAFT   <ns> file:line msg") when the environment has
// LIBRAFT_TRACE; handing it this tracer puts them in dedupd's log instead
// (component "raft", level info), so stderr stays one format.
#ifndef DEDUP_REPLICATION_RAFT_TRACE_H_
#define DEDUP_REPLICATION_RAFT_TRACE_H_

// raft.h declares C functions without extern "C" of its own.
extern "C" {
#include <raft.h>
}

namespace dedup {

// A process-wide tracer, enabled when LIBRAFT_TRACE is set at the first
// call. Give it to raft_uv_set_tracer() after raft_uv_init() and assign it to
// raft.tracer after raft_init() (both install libraft's stderr tracer).
// Never null; never freed; its emit is thread-safe.
[[nodiscard]] struct raft_tracer* RaftLogTracer();

}  // namespace dedup

#endif  // DEDUP_REPLICATION_RAFT_TRACE_H_
