#include "storage/replicated_meta.h"

#include "absl/strings/str_cat.h"
#include "storage/coding.h"
#include "storage/rocks_util.h"
#include "storage/storage_key.h"

namespace dedup::replicated_internal {

std::string MetaKey(absl::string_view name) {
  return absl::StrCat(kMetaPrefix, "replicated.", name);
}
const std::string& AppliedIndexKey() {
  static const std::string* const key = new std::string(MetaKey("applied"));
  return *key;
}
const std::string& NowKey() {
  static const std::string* const key = new std::string(MetaKey("now_ms"));
  return *key;
}
const std::string& FenceKey() {
  static const std::string* const key = new std::string(MetaKey("fence"));
  return *key;
}
std::string MemberKeyPrefix() { return MetaKey("member."); }
std::string MemberKey(uint64_t id) {
  std::string key = MemberKeyPrefix();
  PutBigEndian64(&key, id);
  return key;
}

const std::string& ShardMapEpochKey() {
  static const std::string* const key =
      new std::string(MetaKey("shard_map_epoch"));
  return *key;
}
const std::string& ShardMapKey() {
  static const std::string* const key = new std::string(MetaKey("shard_map"));
  return *key;
}

std::string EncodeU64(uint64_t v) {
  std::string out;
  PutFixed64(&out, v);
  return out;
}

absl::StatusOr<uint64_t> DecodeU64(absl::string_view s,
                                   absl::string_view what) {
  if (s.size() != 8) {
    return absl::DataLossError(
        absl::StrCat(what, ": ", s.size(), " bytes, expected 8"));
  }
  return DecodeFixed64(s.data());
}

absl::StatusOr<uint64_t> ReadMeta(rocksdb::DB* db,
                                  const rocksdb::ReadOptions& options,
                                  const std::string& key) {
  std::string value;
  rocksdb::Status s = db->Get(options, key, &value);
  if (s.IsNotFound()) return 0;
  if (!s.ok()) return FromRocks(s, key);
  return DecodeU64(value, key);
}

}  // namespace dedup::replicated_internal
