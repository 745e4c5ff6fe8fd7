// The replicated state's own keys (applied index, replicated time, fence
// counter, member addresses, shard map) and their 8-byte values. Shared by the
// files of RocksReplicatedState (replicated_state.cc, replicated_ops.cc).
//
// Thread safety: pure functions; the returned references live for the
// process.
#ifndef DEDUP_STORAGE_REPLICATED_META_H_
#define DEDUP_STORAGE_REPLICATED_META_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rocksdb/db.h"

namespace dedup::replicated_internal {

// Replicated metadata, above every record key (storage_key.h).
[[nodiscard]] std::string MetaKey(absl::string_view name);
[[nodiscard]] const std::string& AppliedIndexKey();
[[nodiscard]] const std::string& NowKey();
[[nodiscard]] const std::string& FenceKey();
// How many of the keys above a state always holds once written.
inline constexpr int kMetaKeys = 3;
// Member client addresses: "<meta>replicated.member.<id, 8 bytes BE>".
[[nodiscard]] std::string MemberKeyPrefix();
[[nodiscard]] std::string MemberKey(uint64_t id);
// The shard map (kSetShardMap): its epoch (8 bytes) and its bytes.
[[nodiscard]] const std::string& ShardMapEpochKey();
[[nodiscard]] const std::string& ShardMapKey();

[[nodiscard]] std::string EncodeU64(uint64_t v);
// DataLoss naming `what` unless `s` is 8 bytes.
[[nodiscard]] absl::StatusOr<uint64_t> DecodeU64(absl::string_view s,
                                                 absl::string_view what);
// Reads a u64 metadata value; 0 when absent.
[[nodiscard]] absl::StatusOr<uint64_t> ReadMeta(
    rocksdb::DB* db, const rocksdb::ReadOptions& options,
    const std::string& key);

}  // namespace dedup::replicated_internal

#endif  // DEDUP_STORAGE_REPLICATED_META_H_
