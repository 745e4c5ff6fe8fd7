// Replacing a database directory with another one, crash-safely.
//
// A node that installs a snapshot fetches a checkpoint into `<dir>.incoming`,
// then swaps it in: `<dir>` -> `<dir>.old`, `<dir>.incoming` -> `<dir>`,
// fsync of the parent, `<dir>.old` removed. A crash at any point leaves one
// complete database that RecoverStateDir finds at the next start: the new one
// once the second rename is on disk, the old one before that (its snapshot
// is then fetched again).
//
// Thread safety: none; callers own the directories while calling.
#ifndef DEDUP_STORAGE_STATE_DIR_SWAP_H_
#define DEDUP_STORAGE_STATE_DIR_SWAP_H_

#include <string>

#include "absl/status/status.h"

namespace dedup {

// Where a checkpoint for `dir` is fetched before it is swapped in.
std::string IncomingDirOf(const std::string& dir);

// Makes `incoming` (a complete database) the database at `dir`. Every file
// in `incoming` must already be durable; the renames are made durable
// here. `dir` need not exist.
[[nodiscard]] absl::Status SwapInStateDir(const std::string& incoming,
                                          const std::string& dir);

// At start-up, before `dir` is opened: finishes a swap a crash interrupted
// (`dir` missing, `<dir>.old` and `<dir>.incoming` present: the incoming
// copy was complete), and removes leftovers (a partial fetch, an old copy).
[[nodiscard]] absl::Status RecoverStateDir(const std::string& dir);

// fsyncs a file or directory by path.
[[nodiscard]] absl::Status SyncPath(const std::string& path);

}  // namespace dedup

#endif  // DEDUP_STORAGE_STATE_DIR_SWAP_H_
