// Checks the byte stream one Raft peer sends another, message by message,
// before libraft 0.15 decodes any of it.
//
// libraft's decoder trusts the lengths, counts and terms it reads: a count
// of 2^32-1 entries reads past its buffer, a term of 2^64-1 is persisted
// and the group never elects again. Every inbound peer byte passes through a
// FrameValidator first; the first frame it rejects closes the connection.
// The stream format is libraft 0.15's uv encoding: a preamble (u64 message
// type, u64 header length), the header, then the payload whose length the
// header implies (entry data for AppendEntries, snapshot data for
// InstallSnapshot), all little endian (raft_frame.cc lists the layouts).
//
// Thread safety: a FrameValidator belongs to one connection (one thread at a
// time). The term source may be read from any thread.
#ifndef DEDUP_REPLICATION_RAFT_FRAME_H_
#define DEDUP_REPLICATION_RAFT_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace dedup {

// Why a frame was refused: the label of dedup_peer_frames_rejected_total
// (FrameRejectName gives the label text, lower_snake_case).
enum class FrameReject {
  kUnknownType,    // not one of libraft's six message types
  kHeaderLength,   // header length impossible for the type
  kEntryCount,     // entry count does not fit the header
  kEntryType,      // an entry that is not a command, barrier or change
  kConfiguration,  // a configuration (InstallSnapshot's, or a change
                   // entry's) does not fit or does not parse
  kTooLarge,       // header + payload above the limit
  kTermJump,       // term above the receiver's term plus the allowed jump
  kEntryLength,    // an unpadded entry followed by a non-empty one, which
                   // libraft would read partly past the payload
};
const char* FrameRejectName(FrameReject reason);

// The largest configuration accepted (InstallSnapshot header, change entry):
// a few servers' ids and addresses, so 64 KiB leaves room for hundreds.
inline constexpr uint64_t kMaxSnapshotHeaderBytes = 64 << 10;

struct FrameLimits {
  // Largest header plus payload of one message (--max_raft_message_mb).
  // libraft 0.15 puts every entry from a follower's next index to the end
  // of the log in one AppendEntries (it has no cap), so this must exceed
  // what the log can hold (--raft_log_budget_mb plus 16 bytes per entry):
  // a smaller limit refuses a lagging follower's catch-up at every retry.
  uint64_t max_message_bytes = 64ull << 20;
  // A term may exceed the receiver's current term by at most this much:
  // terms rise by one per election, so a bigger jump is a bug or an attack.
  uint64_t max_term_jump = 1ull << 20;
};

class FrameValidator {
 public:
  // `current_term` returns the receiving node's current Raft term; it is
  // called once per message header.
  FrameValidator(FrameLimits limits, std::function<uint64_t()> current_term);

  // Checks the next `bytes` of the stream (any split: a message may arrive
  // over many calls, one call may hold many messages). Returns the first
  // reason to refuse; after one, every later call returns it again.
  // Buffers at most one message header, and of an AppendEntries only its
  // fixed part, one entry descriptor at a time (entries are checked as they
  // stream), the places of its configuration-change entries (a few KiB)
  // and one such entry's data when the payload passes (libraft parses it),
  // so memory per connection stays near kMaxSnapshotHeaderBytes whatever
  // the limits.
  [[nodiscard]] std::optional<FrameReject> Feed(absl::string_view bytes);

  // Messages fully seen so far (header and payload), for tests and metrics.
  uint64_t messages() const { return messages_; }

 private:
  // What the bytes in buf_ are, once it holds want_ of them.
  enum class Stage { kPreamble, kHeader, kEntry, kChange, kSkip };

  std::optional<FrameReject> Step(absl::string_view* bytes);
  std::optional<FrameReject> OnPreamble();
  std::optional<FrameReject> OnHeader();
  std::optional<FrameReject> OnAppendEntriesHead();
  std::optional<FrameReject> OnEntry();
  std::optional<FrameReject> OnInstallSnapshot();
  std::optional<FrameReject> OnChange();
  std::optional<FrameReject> CheckTerm(uint64_t term) const;
  uint64_t Get64(size_t offset) const;
  // Skips `trailer` header bytes nobody reads, then payload_ bytes, less
  // the change entries', which are buffered and parsed.
  void StartPayload(uint64_t trailer);
  // At payload_pos_: a change entry to buffer, the end, or bytes to skip.
  void NextPayloadPart();
  void Expect(Stage stage, size_t bytes);
  void EndMessage();

  FrameLimits limits_;
  std::function<uint64_t()> current_term_;
  uint64_t messages_ = 0;
  std::optional<FrameReject> rejected_;

  Stage stage_ = Stage::kPreamble;
  std::string buf_;   // the unit being assembled (preamble, header, entry)
  size_t want_ = 16;  // buf_'s size when the unit is complete
  uint64_t type_ = 0;
  uint64_t header_length_ = 0;
  uint64_t term_limit_ = 0;      // highest term this message may carry
  uint64_t entries_left_ = 0;    // AppendEntries descriptors still to come
  uint64_t payload_ = 0;         // payload implied so far
  bool unpadded_entry_ = false;  // a previous entry's length is not 8k
  // The (payload offset, length) of this AppendEntries' change entries.
  std::vector<std::pair<uint64_t, uint32_t>> changes_;
  size_t next_change_ = 0;
  uint64_t skip_trailer_ = 0;  // header bytes left to skip
  uint64_t payload_pos_ = 0;   // payload bytes passed
};

}  // namespace dedup

#endif  // DEDUP_REPLICATION_RAFT_FRAME_H_
