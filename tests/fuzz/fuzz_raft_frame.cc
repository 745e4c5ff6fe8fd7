// Fuzzes the Raft peer frame validator (replication/raft_frame.h): it reads
// bytes from any peer before libraft does, so it must never crash, and what
// it accepts must be safe for libraft 0.15's decoder.
//
// Input: byte 0 picks the limits, bytes 1..8 the receiver's term (little
// endian), the rest is the peer's stream.
//
// Invariants: no crash, no UB; the verdict and the message count do not
// depend on how the stream is split (whole, in chunks of pseudo-random sizes,
// byte by byte for short inputs); both equal those of an independent
// reference that walks the whole buffer the way libraft's decoder would
// (every read it makes inside the header or payload, every allocation
// within the limit, every configuration it decodes, in snapshots and in
// change entries) and checks the term rule; a rejection is final.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "replication/raft_frame.h"
#include "tests/fuzz/fuzz_check.h"

namespace dedup {
namespace {

struct Verdict {
  std::optional<FrameReject> reject;
  uint64_t messages = 0;
  bool operator==(const Verdict& o) const {
    return reject == o.reject && messages == o.messages;
  }
};

uint64_t Le(absl::string_view b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  }
  return v;
}

// The reference: random access over the whole stream, in the order libraft
// meets the fields. Returns nullopt while `s` lacks the bytes to decide.
class Reference {
 public:
  Reference(absl::string_view s, uint64_t term, FrameLimits limits)
      : s_(s),
        limits_(limits),
        max_term_(term + limits.max_term_jump < term
                      ? ~uint64_t{0}
                      : term + limits.max_term_jump) {}

  Verdict Run() {
    Verdict v;
    size_t at = 0;
    for (;;) {
      size_t end = 0;
      std::optional<FrameReject> r = Message(at, &end);
      if (r) return {r, v.messages};
      if (end == 0) return v;  // incomplete
      ++v.messages;
      at = end;
    }
  }

 private:
  bool Has(size_t at, uint64_t n) const {
    return at <= s_.size() && s_.size() - at >= n;
  }
  bool TermOk(size_t at) const { return Le(s_, at, 8) <= max_term_; }

  // Sets *end past the message when it is complete and accepted.
  std::optional<FrameReject> Message(size_t at, size_t* end) {
    if (!Has(at, 16)) return std::nullopt;
    const uint64_t type = Le(s_, at, 8), hl = Le(s_, at + 8, 8);
    if (type == 0 || type > 6) return FrameReject::kUnknownType;
    const size_t h = at + 16;
    static constexpr uint64_t kFixed[7] = {0, 0, 24, 40, 24, 0, 24};
    bool length_ok = hl != 0 && hl <= limits_.max_message_bytes;
    if (type == 1) length_ok &= hl >= 48 && hl % 16 == 0;
    if (type == 3) length_ok &= hl == 32 || hl == 40;
    if (type == 4) length_ok &= hl == 16 || hl == 24;
    if (type == 5) length_ok &= hl >= 66 && hl <= kMaxSnapshotHeaderBytes;
    if (type == 2 || type == 6) length_ok &= hl == kFixed[type];
    if (!length_ok) return FrameReject::kHeaderLength;
    if (type == 1) return AppendEntries(h, hl, end);
    if (!Has(h, hl)) return std::nullopt;
    if (!TermOk(h)) return FrameReject::kTermJump;
    if (type == 3 && !TermOk(h + 24)) return FrameReject::kTermJump;
    if (type == 6 && !TermOk(h + 16)) return FrameReject::kTermJump;
    uint64_t payload = 0;
    if (type == 5) {
      if (!TermOk(h + 16)) return FrameReject::kTermJump;
      const uint64_t conf = Le(s_, h + 32, 8);
      if (conf != hl - 56 || !ConfOk(s_.substr(h + 40, conf))) {
        return FrameReject::kConfiguration;
      }
      payload = Le(s_, h + 40 + conf, 8);
      if (payload > limits_.max_message_bytes - hl) {
        return FrameReject::kTooLarge;
      }
    }
    if (!Has(h + hl, payload)) return std::nullopt;
    *end = h + hl + payload;
    return std::nullopt;
  }

  std::optional<FrameReject> AppendEntries(size_t h, uint64_t hl, size_t* end) {
    if (!Has(h, 40)) return std::nullopt;
    if (!TermOk(h) || !TermOk(h + 16)) return FrameReject::kTermJump;
    const uint64_t n = Le(s_, h + 32, 8);
    if (n != (hl - 48) / 16) return FrameReject::kEntryCount;
    // libraft: exact sum of lengths read; entry i found at the padded sum.
    uint64_t sum = 0, padded_at = 0, last_read_end = 0;
    std::vector<std::pair<uint64_t, uint64_t>> changes;
    for (uint64_t i = 0; i < n; ++i) {
      const size_t d = h + 40 + 16 * i;
      if (!Has(d, 16)) return std::nullopt;
      if (!TermOk(d)) return FrameReject::kTermJump;
      const uint8_t et = static_cast<uint8_t>(s_[d + 8]);
      if (et < 1 || et > 3) return FrameReject::kEntryType;
      const uint64_t len = Le(s_, d + 12, 4);
      if (len > 0) {
        last_read_end = padded_at + len;
        padded_at += (len + 7) / 8 * 8;
      }
      if (last_read_end > sum + len) return FrameReject::kEntryLength;
      if (et == 3 && (len < 19 || len > kMaxSnapshotHeaderBytes ||
                      changes.size() == 256)) {
        return FrameReject::kConfiguration;
      }
      if (sum + len > limits_.max_message_bytes - hl) {
        return FrameReject::kTooLarge;
      }
      if (et == 3) changes.emplace_back(sum, len);
      sum += len;
    }
    // libraft decodes each change entry's configuration when appending.
    for (const auto& [offset, len] : changes) {
      if (!Has(h + hl + offset, len)) return std::nullopt;
      if (!ConfOk(s_.substr(h + hl + offset, len))) {
        return FrameReject::kConfiguration;
      }
    }
    if (!Has(h + hl, sum)) return std::nullopt;
    *end = h + hl + sum;
    return std::nullopt;
  }

  // libraft's configuration decoder stays inside `c`; one server or more,
  // ids above 0, known roles, nothing but padding after them.
  static bool ConfOk(absl::string_view c) {
    if (c.size() < 9 || c[0] != 1) return false;
    const uint64_t n = Le(c, 1, 8);
    size_t at = 9;
    uint64_t seen = 0;
    while (seen < n) {
      if (c.size() < at + 8 || Le(c, at, 8) == 0) return false;
      at += 8;
      while (at < c.size() && c[at] != '\0') ++at;
      if (at + 1 >= c.size()) return false;  // no NUL, or no role byte
      if (static_cast<uint8_t>(c[at + 1]) > 2) return false;
      at += 2;
      ++seen;
    }
    return n > 0 && c.size() - at < 8;
  }

  absl::string_view s_;
  FrameLimits limits_;
  uint64_t max_term_;
};

Verdict FeedChunks(absl::string_view s, uint64_t term, FrameLimits limits,
                   uint64_t seed) {
  FrameValidator v(limits, [term] { return term; });
  std::optional<FrameReject> r;
  size_t at = 0;
  while (at < s.size()) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const size_t n = std::min<size_t>(s.size() - at, 1 + (seed >> 33) % 97);
    std::optional<FrameReject> now = v.Feed(s.substr(at, n));
    FUZZ_CHECK(!r || now == r);  // a rejection is final
    r = now;
    at += n;
  }
  return {r, v.messages()};
}

}  // namespace
}  // namespace dedup

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using dedup::FrameLimits;
  if (size < 9) return 0;
  FrameLimits limits;
  const uint8_t pick = data[0];
  static constexpr uint64_t kMax[4] = {64ull << 20, 4096, 200, ~uint64_t{0}};
  static constexpr uint64_t kJump[4] = {1ull << 20, 3, 0, ~uint64_t{0}};
  limits.max_message_bytes = kMax[pick & 3];
  limits.max_term_jump = kJump[(pick >> 2) & 3];
  const uint64_t term = dedup::Le(
      absl::string_view(reinterpret_cast<const char*>(data), size), 1, 8);
  const absl::string_view s(reinterpret_cast<const char*>(data) + 9, size - 9);

  dedup::FrameValidator whole(limits, [term] { return term; });
  const dedup::Verdict w{whole.Feed(s), whole.messages()};
  const dedup::Verdict ref = dedup::Reference(s, term, limits).Run();
  FUZZ_CHECK(w == ref);
  FUZZ_CHECK(dedup::FeedChunks(s, term, limits, size) == w);
  if (s.size() <= 4096) {
    dedup::FrameValidator bytes(limits, [term] { return term; });
    std::optional<dedup::FrameReject> r;
    for (char c : s) r = bytes.Feed(absl::string_view(&c, 1));
    FUZZ_CHECK((dedup::Verdict{r, bytes.messages()} == w));
  }
  // Every accepted message takes at least a preamble and a 16-byte header.
  FUZZ_CHECK(w.messages <= s.size() / 32);
  return 0;
}
