#include "replication/raft_frame.h"

#include <raft.h>

#include <algorithm>
#include <limits>
#include <utility>

namespace dedup {
namespace {

// libraft 0.15's uv encoding (src/uv_encoding.c), as captured between real
// dedupd nodes (tests/unit/capture_raft_frames.py). Header lengths: see
// HeaderLengthFits. Payload: AppendEntries, the exact sum of its entries'
// lengths (libraft reads that many bytes, but finds entry i at the sum of
// the earlier lengths rounded up to 8 each); InstallSnapshot, its data.
constexpr size_t kPreambleBytes = 16;  // u64 type, u64 header length
// AppendEntries header: term, prev_log_index, prev_log_term, leader_commit,
// entry count, then one 16-byte descriptor per entry (u64 term, u8 type,
// 3 unused, u32 data length), then 8 bytes libraft counts (a "leader id")
// but never writes.
constexpr uint64_t kAppendEntriesHead = 40;
constexpr uint64_t kEntryDescriptor = 16;
constexpr uint64_t kUnwrittenTail = 8;
constexpr uint64_t kAppendEntriesFixed = kAppendEntriesHead + kUnwrittenTail;
// InstallSnapshot header: term, last_index, last_term, conf_index, conf
// length, the configuration, the data length, the same 8 unwritten bytes.
constexpr uint64_t kSnapshotHead = 40;
constexpr uint64_t kSnapshotFixed = kSnapshotHead + 8 + kUnwrittenTail;
// Configuration encoding: u8 format (1), u64 server count, per server u64
// id, NUL-terminated address, u8 role; padded with < 8 bytes to 8k.
constexpr uint8_t kConfigurationFormat = 1;
constexpr size_t kConfigurationHead = 9;
constexpr uint64_t kSmallestConfiguration = kConfigurationHead + 8 + 1 + 1;
// Configuration-change entries checked per AppendEntries (their offsets are
// kept until the payload passes): a batch holds a handful at most, since
// each is an operator's membership change.
constexpr size_t kMaxChangesPerMessage = 256;

uint64_t Load64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

uint32_t Load32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// The header lengths libraft 0.15 sends, plus the legacy ones its decoder
// still reads (RequestVote without flags, RequestVoteResult without flags).
// A shorter header would make the decoder read past it.
bool HeaderLengthFits(uint64_t type, uint64_t length, uint64_t max_bytes) {
  if (length == 0 || length > max_bytes) return false;
  switch (type) {
    case RAFT_IO_APPEND_ENTRIES:
      return length >= kAppendEntriesFixed &&
             (length - kAppendEntriesFixed) % kEntryDescriptor == 0;
    case RAFT_IO_APPEND_ENTRIES_RESULT:
      return length == 24;
    case RAFT_IO_REQUEST_VOTE:
      return length == 32 || length == 40;
    case RAFT_IO_REQUEST_VOTE_RESULT:
      return length == 16 || length == 24;
    case RAFT_IO_INSTALL_SNAPSHOT:
      return length > kSnapshotFixed + kConfigurationHead &&
             length <= kMaxSnapshotHeaderBytes;
    case RAFT_IO_TIMEOUT_NOW:
      return length == 24;
  }
  return false;
}

// True when libraft's configuration decoder stays inside `conf` and gets a
// configuration a leader could have sent (at least one server, ids > 0,
// known roles).
bool ConfigurationParses(absl::string_view conf) {
  if (conf.size() < kConfigurationHead ||
      static_cast<uint8_t>(conf[0]) != kConfigurationFormat) {
    return false;
  }
  const uint64_t servers = Load64(conf.data() + 1);
  if (servers == 0) return false;
  size_t pos = kConfigurationHead;
  // Each server takes at least 10 bytes, so the loop ends within
  // conf.size() / 10 rounds whatever `servers` claims.
  for (uint64_t i = 0; i < servers; ++i) {
    if (conf.size() - pos < 8 || Load64(conf.data() + pos) == 0) return false;
    pos += 8;  // id (libraft requires > 0)
    const size_t nul = conf.find('\0', pos);
    if (nul == absl::string_view::npos) return false;
    pos = nul + 1;
    if (pos >= conf.size()) return false;  // the role byte
    const uint8_t role = static_cast<uint8_t>(conf[pos++]);
    if (role != RAFT_STANDBY && role != RAFT_VOTER && role != RAFT_SPARE) {
      return false;
    }
  }
  return conf.size() - pos < 8;  // only the padding may follow
}

}  // namespace

const char* FrameRejectName(FrameReject reason) {
  switch (reason) {
    case FrameReject::kUnknownType:
      return "unknown_type";
    case FrameReject::kHeaderLength:
      return "header_length";
    case FrameReject::kEntryCount:
      return "entry_count";
    case FrameReject::kEntryType:
      return "entry_type";
    case FrameReject::kConfiguration:
      return "configuration";
    case FrameReject::kTooLarge:
      return "too_large";
    case FrameReject::kTermJump:
      return "term_jump";
    case FrameReject::kEntryLength:
      return "entry_length";
  }
  return "unknown";
}

FrameValidator::FrameValidator(FrameLimits limits,
                               std::function<uint64_t()> current_term)
    : limits_(limits), current_term_(std::move(current_term)) {
  buf_.reserve(kPreambleBytes);
}

std::optional<FrameReject> FrameValidator::Feed(absl::string_view bytes) {
  while (!rejected_.has_value() && !bytes.empty()) rejected_ = Step(&bytes);
  return rejected_;
}

std::optional<FrameReject> FrameValidator::Step(absl::string_view* bytes) {
  if (stage_ == Stage::kSkip) {
    const bool trailer = skip_trailer_ > 0;
    const uint64_t until = next_change_ < changes_.size()
                               ? changes_[next_change_].first
                               : payload_;
    const uint64_t left = trailer ? skip_trailer_ : until - payload_pos_;
    const size_t n =
        static_cast<size_t>(std::min<uint64_t>(left, bytes->size()));
    bytes->remove_prefix(n);
    if (trailer) {
      skip_trailer_ -= n;
    } else {
      payload_pos_ += n;
    }
    if (n == left) NextPayloadPart();
    return std::nullopt;
  }
  const size_t n = std::min(want_ - buf_.size(), bytes->size());
  buf_.append(bytes->data(), n);
  bytes->remove_prefix(n);
  if (buf_.size() < want_) return std::nullopt;
  switch (stage_) {
    case Stage::kPreamble:
      return OnPreamble();
    case Stage::kHeader:
      return OnHeader();
    case Stage::kEntry:
      return OnEntry();
    case Stage::kChange:
      return OnChange();
    case Stage::kSkip:
      break;
  }
  return std::nullopt;
}

std::optional<FrameReject> FrameValidator::OnPreamble() {
  type_ = Get64(0);
  header_length_ = Get64(8);
  if (type_ < RAFT_IO_APPEND_ENTRIES || type_ > RAFT_IO_TIMEOUT_NOW) {
    return FrameReject::kUnknownType;
  }
  if (!HeaderLengthFits(type_, header_length_, limits_.max_message_bytes)) {
    return FrameReject::kHeaderLength;
  }
  const uint64_t term = current_term_();
  term_limit_ =
      term > std::numeric_limits<uint64_t>::max() - limits_.max_term_jump
          ? std::numeric_limits<uint64_t>::max()
          : term + limits_.max_term_jump;
  // Of an AppendEntries only the fixed part: its descriptors stream.
  Expect(Stage::kHeader, static_cast<size_t>(type_ == RAFT_IO_APPEND_ENTRIES
                                                 ? kAppendEntriesHead
                                                 : header_length_));
  return std::nullopt;
}

std::optional<FrameReject> FrameValidator::OnHeader() {
  std::optional<FrameReject> bad = CheckTerm(Get64(0));
  switch (type_) {
    case RAFT_IO_APPEND_ENTRIES:
      return bad ? bad : OnAppendEntriesHead();
    case RAFT_IO_INSTALL_SNAPSHOT:
      return bad ? bad : OnInstallSnapshot();
    case RAFT_IO_REQUEST_VOTE:  // last_log_term
      if (!bad) bad = CheckTerm(Get64(24));
      break;
    case RAFT_IO_TIMEOUT_NOW:  // last_log_term
      if (!bad) bad = CheckTerm(Get64(16));
      break;
    default:  // the results carry only the term
      break;
  }
  if (!bad) EndMessage();
  return bad;
}

std::optional<FrameReject> FrameValidator::OnAppendEntriesHead() {
  if (auto bad = CheckTerm(Get64(16))) return bad;  // prev_log_term
  const uint64_t count = Get64(32);
  if (count != (header_length_ - kAppendEntriesFixed) / kEntryDescriptor) {
    return FrameReject::kEntryCount;
  }
  entries_left_ = count;
  payload_ = 0;
  unpadded_entry_ = false;
  changes_.clear();
  if (count == 0) {
    StartPayload(kUnwrittenTail);
  } else {
    Expect(Stage::kEntry, kEntryDescriptor);
  }
  return std::nullopt;
}

std::optional<FrameReject> FrameValidator::OnEntry() {
  if (auto bad = CheckTerm(Get64(0))) return bad;
  const uint8_t type = static_cast<uint8_t>(buf_[8]);
  if (type != RAFT_COMMAND && type != RAFT_BARRIER && type != RAFT_CHANGE) {
    return FrameReject::kEntryType;
  }
  const uint32_t length = Load32(buf_.data() + 12);
  // libraft finds entry i at the sum of the earlier lengths each rounded up
  // to 8 but reads only their exact sum: after an entry whose length is not
  // 8k, a non-empty entry would be read partly past the payload.
  if (length > 0) {
    if (unpadded_entry_) return FrameReject::kEntryLength;
    unpadded_entry_ = length % 8 != 0;
  }
  // libraft decodes a change entry's configuration when it appends it: a
  // bad one (even an empty one, which it reads through a null pointer) is
  // checked when the payload passes, so its place is kept.
  if (type == RAFT_CHANGE) {
    if (length < kSmallestConfiguration || length > kMaxSnapshotHeaderBytes ||
        changes_.size() == kMaxChangesPerMessage) {
      return FrameReject::kConfiguration;
    }
  }
  // payload_ never exceeds `room`, so neither line can wrap.
  const uint64_t room = limits_.max_message_bytes - header_length_;
  if (length > room - payload_) return FrameReject::kTooLarge;
  // With only the last non-empty entry unpadded, entries sit at the exact
  // sums of the lengths before them, as libraft finds them.
  if (type == RAFT_CHANGE) changes_.emplace_back(payload_, length);
  payload_ += length;
  if (--entries_left_ == 0) {
    StartPayload(kUnwrittenTail);
  } else {
    Expect(Stage::kEntry, kEntryDescriptor);
  }
  return std::nullopt;
}

std::optional<FrameReject> FrameValidator::OnInstallSnapshot() {
  if (auto bad = CheckTerm(Get64(16))) return bad;  // last_term
  const uint64_t conf_length = Get64(32);
  if (conf_length != header_length_ - kSnapshotFixed ||
      !ConfigurationParses(absl::string_view(buf_).substr(
          kSnapshotHead, static_cast<size_t>(conf_length)))) {
    return FrameReject::kConfiguration;
  }
  const uint64_t data_length =
      Get64(static_cast<size_t>(kSnapshotHead + conf_length));
  if (data_length > limits_.max_message_bytes - header_length_) {
    return FrameReject::kTooLarge;
  }
  payload_ = data_length;
  changes_.clear();
  StartPayload(0);
  return std::nullopt;
}

std::optional<FrameReject> FrameValidator::OnChange() {
  if (!ConfigurationParses(buf_)) return FrameReject::kConfiguration;
  payload_pos_ += buf_.size();
  ++next_change_;
  NextPayloadPart();
  return std::nullopt;
}

std::optional<FrameReject> FrameValidator::CheckTerm(uint64_t term) const {
  if (term > term_limit_) return FrameReject::kTermJump;
  return std::nullopt;
}

uint64_t FrameValidator::Get64(size_t offset) const {
  return Load64(buf_.data() + offset);
}

void FrameValidator::StartPayload(uint64_t trailer) {
  skip_trailer_ = trailer;
  payload_pos_ = 0;
  next_change_ = 0;
  if (trailer > 0) {
    stage_ = Stage::kSkip;
    buf_.clear();
  } else {
    NextPayloadPart();
  }
}

void FrameValidator::NextPayloadPart() {
  if (next_change_ < changes_.size() &&
      payload_pos_ == changes_[next_change_].first) {
    Expect(Stage::kChange, changes_[next_change_].second);
  } else if (payload_pos_ == payload_) {
    EndMessage();
  } else {
    stage_ = Stage::kSkip;
    buf_.clear();
  }
}

void FrameValidator::Expect(Stage stage, size_t bytes) {
  stage_ = stage;
  want_ = bytes;
  buf_.clear();
}

void FrameValidator::EndMessage() {
  ++messages_;
  Expect(Stage::kPreamble, kPreambleBytes);
}

}  // namespace dedup
