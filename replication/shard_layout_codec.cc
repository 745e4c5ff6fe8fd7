#include "replication/shard_layout_codec.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "storage/coding.h"

namespace dedup {
namespace {

constexpr uint8_t kVersion = 1;
// Bytes of a group before its replicas: id, first, end, replica count.
constexpr size_t kGroupHeader = 16;

class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  bool U32(uint32_t* v) {
    if (in_.size() < 4) return false;
    *v = DecodeFixed32(in_.data());
    in_.remove_prefix(4);
    return true;
  }
  bool U64(uint64_t* v) {
    if (in_.size() < 8) return false;
    *v = DecodeFixed64(in_.data());
    in_.remove_prefix(8);
    return true;
  }
  size_t left() const { return in_.size(); }

 private:
  absl::string_view in_;
};

absl::Status Truncated(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("shard map: truncated ", what));
}

absl::Status DecodeGroup(Reader& r, GroupPlacement* group) {
  uint32_t replicas = 0;
  if (!r.U32(&group->id) || !r.U32(&group->first_slot) ||
      !r.U32(&group->end_slot) || !r.U32(&replicas)) {
    return Truncated("group");
  }
  // Counts come from another node: bounded by the bytes before allocating.
  if (replicas > r.left() / 8) return Truncated("replicas");
  group->replicas.resize(replicas);
  for (uint64_t& node : group->replicas) {
    if (!r.U64(&node)) return Truncated("replicas");
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeShardLayout(const ShardLayout& layout) {
  std::string out;
  out.push_back(static_cast<char>(kVersion));
  PutFixed64(&out, layout.epoch);
  PutFixed32(&out, static_cast<uint32_t>(layout.groups.size()));
  for (const GroupPlacement& group : layout.groups) {
    PutFixed32(&out, group.id);
    PutFixed32(&out, group.first_slot);
    PutFixed32(&out, group.end_slot);
    PutFixed32(&out, static_cast<uint32_t>(group.replicas.size()));
    for (uint64_t node : group.replicas) PutFixed64(&out, node);
  }
  return out;
}

absl::StatusOr<ShardLayout> DecodeShardLayout(absl::string_view bytes) {
  if (bytes.empty()) return absl::DataLossError("shard map: empty");
  if (static_cast<uint8_t>(bytes[0]) != kVersion) {
    return absl::DataLossError(absl::StrCat("shard map: unknown version ",
                                            static_cast<uint8_t>(bytes[0])));
  }
  Reader r(bytes.substr(1));
  ShardLayout layout;
  uint32_t groups = 0;
  if (!r.U64(&layout.epoch) || !r.U32(&groups)) return Truncated("header");
  if (groups > r.left() / kGroupHeader) return Truncated("groups");
  layout.groups.resize(groups);
  for (GroupPlacement& group : layout.groups) {
    if (absl::Status s = DecodeGroup(r, &group); !s.ok()) return s;
  }
  if (r.left() != 0) return absl::DataLossError("shard map: trailing bytes");
  if (absl::Status valid = ValidateLayout(layout); !valid.ok()) {
    return absl::DataLossError(absl::StrCat("shard map: ", valid.message()));
  }
  return layout;
}

}  // namespace dedup
