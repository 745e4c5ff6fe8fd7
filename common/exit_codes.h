// dedupd's process exit codes, defined once: the code that exits uses these
// constants and --help lists the table (an integration test checks that every
// code is listed). Header-only and dependency-free so that storage/ and
// replication/, which end the process on some failures, may include it.
#ifndef DEDUP_COMMON_EXIT_CODES_H_
#define DEDUP_COMMON_EXIT_CODES_H_

namespace dedup {
namespace exit_code {

inline constexpr int kCleanStop = 0;
inline constexpr int kStopError = 1;
inline constexpr int kBadFlags = 2;
inline constexpr int kDataDir = 3;
inline constexpr int kListen = 4;
inline constexpr int kDamagedLogEntry = 5;
inline constexpr int kStorageFailure = 6;
inline constexpr int kRecoveryRefused = 7;
inline constexpr int kDataFormat = 8;
inline constexpr int kRestoreRefused = 9;

}  // namespace exit_code

struct ExitCodeInfo {
  int code;
  const char* name;     // stable, for programs and logs
  const char* meaning;  // for people (--help)
};

// Every exit code, in ascending order.
inline constexpr ExitCodeInfo kExitCodes[] = {
    {exit_code::kCleanStop, "clean_stop", "clean stop"},
    {exit_code::kStopError, "stop_error",
     "error while stopping (the store did not close cleanly)"},
    {exit_code::kBadFlags, "bad_flags",
     "bad flags or configuration files (tenants, policy, event log)"},
    {exit_code::kDataDir, "data_dir",
     "data dir unusable, damaged or locked by another dedupd (cluster mode: "
     "also a fetched snapshot that could not be installed)"},
    {exit_code::kListen, "listen",
     "cannot listen (address in use or invalid) or write --ready_file"},
    {exit_code::kDamagedLogEntry, "damaged_log_entry",
     "(cluster mode) a damaged log entry in memory: restart the node"},
    {exit_code::kStorageFailure, "storage_failure",
     "(cluster mode) a Raft log write or state write failed (disk full, I/O "
     "error): make room or fix the disk, then restart the node"},
    {exit_code::kRecoveryRefused, "recovery_refused",
     "(cluster mode) --recover_as_sole_voter refused: the group has a leader, "
     "another member's log is ahead (see --recover_even_if_behind), this node "
     "already recovered the group once, or it has no log to recover from"},
    {exit_code::kDataFormat, "data_format",
     "the data dir's format (its DEDUP-FORMAT file) is one this dedupd cannot "
     "read: written by a newer release (run that one or a later one) or too "
     "old to upgrade; nothing in the dir was changed"},
    {exit_code::kRestoreRefused, "restore_refused",
     "--restore_from refused: the backup's manifest or one of its files is "
     "missing or damaged (named), it is in a newer data format, it does not "
     "fit the mode (single node or cluster seed), or --data_dir is not "
     "empty; nothing was written"},
};

}  // namespace dedup

#endif  // DEDUP_COMMON_EXIT_CODES_H_
