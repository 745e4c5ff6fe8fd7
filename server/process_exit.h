// The end of dedupd's process after Daemon::Stop.
#ifndef DEDUP_SERVER_PROCESS_EXIT_H_
#define DEDUP_SERVER_PROCESS_EXIT_H_

namespace dedup {

// Flushes stdio, checks for leaks in a LeakSanitizer build, then ends the
// process with `code` at once: no destructor runs, so a stopped Daemon's
// client listener is closed by the kernel (its clients see UNAVAILABLE),
// never by gRPC's Server::Shutdown (see Daemon::Stop).
[[noreturn]] void ExitProcess(int code);

}  // namespace dedup

#endif  // DEDUP_SERVER_PROCESS_EXIT_H_
