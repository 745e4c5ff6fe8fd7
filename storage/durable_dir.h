// Creating directories and small files so that they survive a power cut.
//
// mkdir makes a name in the parent directory, and a name is durable only once
// the parent is fsynced; RocksDB and libraft sync the files they create in a
// directory and the directory itself, never its parent. A data dir made at
// a node's first start without this would vanish, with every acknowledged
// write in it, if the power went off before the parent's entry reached the
// disk by chance.
//
// Thread safety: none needed; callers own the paths.
#ifndef DEDUP_STORAGE_DURABLE_DIR_H_
#define DEDUP_STORAGE_DURABLE_DIR_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"

namespace dedup {

// Like `mkdir -p path`, then fsyncs every directory it made and the parent
// of each, and always `path` and its parent: a directory that already exists
// may have been made by an earlier start, or by a tool, that never synced it.
[[nodiscard]] absl::Status CreateDirectoriesDurably(const std::string& path);

// Makes `path` hold `contents`, all or nothing, durably: a temporary file
// beside it is written and fsynced, renamed over `path`, and the directory
// fsynced. A crash or power cut leaves the old file or the new one, never an
// empty or partial one, and never loses the name once this returns OK.
// ResourceExhausted when the file system is full, Unavailable otherwise.
[[nodiscard]] absl::Status ReplaceFileDurably(const std::string& path,
                                              const std::string& contents);

// Like ReplaceFileDurably, but keeps a file already at `path` (OK then,
// without writing): for a file made once, such as a secret, that a racing
// start may have made first. `mode`: the new file's permissions.
[[nodiscard]] absl::Status CreateFileDurably(const std::string& path,
                                             const std::string& contents,
                                             mode_t mode);

}  // namespace dedup

#endif  // DEDUP_STORAGE_DURABLE_DIR_H_
