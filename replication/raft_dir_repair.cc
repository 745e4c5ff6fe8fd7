#include "replication/raft_dir_repair.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/log.h"
#include "storage/state_dir_swap.h"

namespace dedup {
namespace {

namespace fs = std::filesystem;

struct ClosedSegment {
  unsigned long long first = 0;
  unsigned long long end = 0;
  std::string name;
};

// The files libraft's loader looks at (uv_list.c), by kind.
struct RaftDirListing {
  std::vector<ClosedSegment> closed;
  std::vector<std::string> open;
  bool has_snapshot = false;  // any snapshot-* file, complete or not
};

// Matches a name as libraft 0.15 does (sscanf of the whole name).
bool ParseClosed(const std::string& name, ClosedSegment* segment) {
  int consumed = 0;
  if (std::sscanf(name.c_str(), "%16llu-%16llu%n", &segment->first,
                  &segment->end, &consumed) != 2 ||
      consumed != static_cast<int>(name.size())) {
    return false;
  }
  segment->name = name;
  return true;
}

bool ParseOpen(const std::string& name) {
  unsigned long long counter = 0;
  int consumed = 0;
  return std::sscanf(name.c_str(), "open-%llu%n", &counter, &consumed) == 1 &&
         consumed == static_cast<int>(name.size());
}

absl::StatusOr<RaftDirListing> ListRaftDir(const std::string& dir) {
  RaftDirListing listing;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    ClosedSegment segment;
    if (ParseClosed(name, &segment)) {
      listing.closed.push_back(std::move(segment));
    } else if (ParseOpen(name)) {
      listing.open.push_back(name);
    } else if (absl::StartsWith(name, "snapshot-")) {
      listing.has_snapshot = true;
    }
  }
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot list ", dir, ": ", ec.message()));
  }
  return listing;
}

// Whether the file has a non-zero byte. libraft removes an open segment
// that is empty or all zeros (allocated, never written) at load.
absl::StatusOr<bool> HoldsData(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InternalError(absl::StrCat("cannot read ", path));
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      if (buf[i] != 0) return true;
    }
  }
  if (in.bad()) return absl::InternalError(absl::StrCat("cannot read ", path));
  return false;
}

absl::StatusOr<bool> AnyOpenSegmentHoldsData(const std::string& dir,
                                             const RaftDirListing& listing) {
  for (const std::string& name : listing.open) {
    absl::StatusOr<bool> data = HoldsData((fs::path(dir) / name).string());
    if (!data.ok() || *data) return data;
  }
  return false;
}

absl::Status RemoveFile(const std::string& dir, const std::string& name) {
  std::error_code ec;
  const std::string path = (fs::path(dir) / name).string();
  if (!fs::remove(path, ec) || ec) {
    return absl::InternalError(absl::StrCat("cannot remove ", path, ": ",
                                            ec ? ec.message() : "missing"));
  }
  return absl::OkStatus();
}

struct Metadata {
  uint64_t version = 0;  // 0: no metadata
  uint64_t term = 0;
  uint64_t vote = 0;
};

uint64_t Le64(const unsigned char* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

// metadataN as libraft 0.15 reads it (uv_metadata.c): four little-endian
// words (format 1, version, term, vote); missing or shorter than 32 bytes
// is "not written". nullopt: a file libraft would refuse.
std::optional<Metadata> ReadMetadataFile(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return Metadata();
  const uintmax_t size = fs::file_size(path, ec);
  if (ec || size > 32) return std::nullopt;
  if (size < 32) return Metadata();
  unsigned char words[32];
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(words), sizeof words)) {
    return std::nullopt;
  }
  Metadata metadata{Le64(words + 8), Le64(words + 16), Le64(words + 24)};
  if (Le64(words) != 1 || metadata.version == 0) return std::nullopt;
  return metadata;
}

// The metadata libraft would load (the higher version); nullopt when it
// would refuse the files.
std::optional<Metadata> ReadMetadata(const std::string& dir) {
  std::optional<Metadata> one = ReadMetadataFile(dir + "/metadata1");
  std::optional<Metadata> two = ReadMetadataFile(dir + "/metadata2");
  if (!one || !two) return std::nullopt;
  if (one->version == two->version && one->version != 0) return std::nullopt;
  return one->version > two->version ? *one : *two;
}

// Removes `names` (in that order), appending each to `removed`, and makes
// that durable.
absl::Status RemoveDurably(const std::string& dir,
                           const std::vector<std::string>& names,
                           absl::string_view why,
                           std::vector<std::string>* removed) {
  if (names.empty()) return absl::OkStatus();
  for (const std::string& name : names) {
    if (absl::Status s = RemoveFile(dir, name); !s.ok()) return s;
    LogWarning("raft dir ", dir, ": removed ", name, ": ", why);
    removed->push_back(name);
  }
  return SyncPath(dir);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> RepairInterruptedTruncation(
    const std::string& dir) {
  absl::StatusOr<RaftDirListing> listing = ListRaftDir(dir);
  if (!listing.ok()) return listing.status();
  std::vector<ClosedSegment>& closed = listing->closed;
  std::sort(closed.begin(), closed.end(),
            [](const ClosedSegment& a, const ClosedSegment& b) {
              return a.first != b.first ? a.first < b.first : a.end < b.end;
            });
  // The lowest shared first index; sorted, its shortest segment is first.
  size_t keep = closed.size();
  for (size_t i = 0; i + 1 < closed.size(); ++i) {
    if (closed[i].first == closed[i + 1].first) {
      keep = i;
      break;
    }
  }
  if (keep == closed.size()) return std::vector<std::string>();
  const ClosedSegment& kept = closed[keep];
  absl::StatusOr<bool> open_data = AnyOpenSegmentHoldsData(dir, *listing);
  if (!open_data.ok()) return open_data.status();
  if (*open_data) {
    LogWarning("raft dir ", dir, ": closed segments share first index ",
               kept.first,
               " but an open segment holds entries; not what an "
               "interrupted truncation leaves, left as is");
    return std::vector<std::string>();
  }
  // The longer ones sharing the first index, and the later ones: what the
  // truncation was unlinking. Later ones go first, and durably, so that a
  // cut in between still leaves the shared first index to find next time.
  std::vector<std::string> later;
  std::vector<std::string> longer;
  for (auto it = closed.rbegin(); it != closed.rend(); ++it) {
    if (it->first > kept.end) later.push_back(it->name);
    if (it->first == kept.first && it->end > kept.end) {
      longer.push_back(it->name);
    }
  }
  const std::string why = absl::StrCat(
      "an interrupted log truncation left it (it holds entries from ",
      kept.end + 1, " on, which were being dropped: never committed); ",
      kept.name, " is the truncated segment");
  std::vector<std::string> removed;
  if (absl::Status s = RemoveDurably(dir, later, why, &removed); !s.ok()) {
    return s;
  }
  if (absl::Status s = RemoveDurably(dir, longer, why, &removed); !s.ok()) {
    return s;
  }
  LogInfo("raft dir ", dir,
          ": finished an interrupted log truncation: the "
          "log now ends at index ",
          kept.end);
  return removed;
}

absl::StatusOr<std::vector<std::string>> RepairInterruptedBootstrap(
    const std::string& dir) {
  const std::optional<Metadata> metadata = ReadMetadata(dir);
  // Term 0 does not stop a bootstrap; a vote or a later term means the
  // node took part in an election, so its metadata must stay.
  if (!metadata || metadata->version == 0 || metadata->term != 1 ||
      metadata->vote != 0) {
    return std::vector<std::string>();
  }
  absl::StatusOr<RaftDirListing> listing = ListRaftDir(dir);
  if (!listing.ok()) return listing.status();
  if (!listing->closed.empty() || listing->has_snapshot) {
    return std::vector<std::string>();
  }
  absl::StatusOr<bool> open_data = AnyOpenSegmentHoldsData(dir, *listing);
  if (!open_data.ok()) return open_data.status();
  if (*open_data) return std::vector<std::string>();
  std::vector<std::string> names;
  std::error_code ec;
  for (const char* name : {"metadata1", "metadata2"}) {
    if (fs::exists(fs::path(dir) / name, ec)) names.push_back(name);
  }
  std::vector<std::string> removed;
  if (absl::Status s = RemoveDurably(
          dir, names,
          "an interrupted bootstrap left term 1 and no log (no vote was cast); "
          "the node bootstraps again",
          &removed);
      !s.ok()) {
    return s;
  }
  return removed;
}

absl::Status RepairRaftDir(const std::string& dir, bool founder) {
  if (absl::StatusOr<std::vector<std::string>> removed =
          RepairInterruptedTruncation(dir);
      !removed.ok()) {
    return removed.status();
  }
  if (!founder) return absl::OkStatus();
  return RepairInterruptedBootstrap(dir).status();
}

}  // namespace dedup
