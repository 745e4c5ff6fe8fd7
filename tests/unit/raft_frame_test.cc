#include "replication/raft_frame.h"

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/unit/raft_frame_vectors.h"

namespace dedup {
namespace {

constexpr uint64_t kMax64 = ~uint64_t{0};
constexpr uint64_t kTerm = 5;  // the receiver's term in most tests

std::string Hex(const RaftFrameVector& v) {
  return absl::HexStringToBytes(v.hex);
}

// --- Messages written by hand in libraft 0.15's layout. -------------------

void Put64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

void Put32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

std::string Message(uint64_t type, const std::string& header,
                    const std::string& payload = "") {
  std::string out;
  Put64(&out, type);
  Put64(&out, header.size());
  return out + header + payload;
}

std::string Words(std::initializer_list<uint64_t> words) {
  std::string out;
  for (uint64_t w : words) Put64(&out, w);
  return out;
}

struct Entry {
  Entry(uint64_t term = kTerm, uint8_t type = 1, uint32_t length = 8,
        std::string data = "")
      : term(term), type(type), length(length), data(std::move(data)) {}
  uint64_t term;
  uint8_t type;  // 1: RAFT_COMMAND
  uint32_t length;
  std::string data;  // when set, the entry's bytes (and length)
};

// An AppendEntries with `count` in the header (default: entries.size()).
std::string AppendEntries(std::vector<Entry> entries, uint64_t term = kTerm,
                          uint64_t prev_term = kTerm,
                          std::optional<uint64_t> count = std::nullopt,
                          bool with_payload = true) {
  std::string header = Words({term, 7, prev_term, 6});
  Put64(&header, count.value_or(entries.size()));
  std::string payload;
  for (const Entry& e : entries) {
    Put64(&header, e.term);
    header.push_back(static_cast<char>(e.type));
    header.append(3, '\0');
    Put32(&header, e.data.empty() ? e.length : e.data.size());
    if (with_payload) {
      payload += e.data.empty() ? std::string(e.length, 'x') : e.data;
    }
  }
  header.append(8, '\xaa');  // the "leader id" libraft counts, never writes
  return Message(1, header, payload);
}

struct Server {
  uint64_t id;
  std::string address;
  uint8_t role = 1;
};

std::string Configuration(const std::vector<Server>& servers,
                          std::optional<uint64_t> count = std::nullopt) {
  std::string out(1, '\x01');
  Put64(&out, count.value_or(servers.size()));
  for (const Server& s : servers) {
    Put64(&out, s.id);
    out += s.address;
    out.push_back('\0');
    out.push_back(static_cast<char>(s.role));
  }
  out.append((8 - out.size() % 8) % 8, '\x55');
  return out;
}

const std::vector<Server> kThree = {
    {1, "127.0.0.1:7001"}, {2, "127.0.0.1:7002"}, {3, "127.0.0.1:7003"}};

std::string InstallSnapshot(const std::string& conf, uint64_t data_length,
                            uint64_t term = kTerm, uint64_t last_term = kTerm,
                            std::optional<uint64_t> conf_length = std::nullopt,
                            bool with_data = true) {
  std::string header = Words({term, 100, last_term, 90});
  Put64(&header, conf_length.value_or(conf.size()));
  header += conf;
  Put64(&header, data_length);
  header.append(8, '\xaa');
  return Message(5, header, with_data ? std::string(data_length, 'd') : "");
}

// --- Helpers. ---------------------------------------------------------------

FrameValidator Validator(uint64_t term = kTerm, FrameLimits limits = {}) {
  return FrameValidator(limits, [term] { return term; });
}

std::optional<FrameReject> FeedAll(const std::string& bytes,
                                   uint64_t term = kTerm,
                                   FrameLimits limits = {}) {
  FrameValidator v = Validator(term, limits);
  return v.Feed(bytes);
}

// Feeds `bytes` split at `cut`; returns the verdict and the message count.
std::pair<std::optional<FrameReject>, uint64_t> FeedSplit(
    const std::string& bytes, size_t cut) {
  FrameValidator v = Validator();
  std::optional<FrameReject> r =
      v.Feed(absl::string_view(bytes).substr(0, cut));
  if (!r) r = v.Feed(absl::string_view(bytes).substr(cut));
  return {r, v.messages()};
}

// --- Real traffic. ----------------------------------------------------------

TEST(RaftFrameTest, AcceptsEveryRealMessageWholeAndSplitAnywhere) {
  for (const RaftFrameVector& vector : kRealMessages) {
    SCOPED_TRACE(vector.name);
    const std::string bytes = Hex(vector);
    for (size_t cut = 0; cut <= bytes.size(); ++cut) {
      auto [verdict, messages] = FeedSplit(bytes, cut);
      ASSERT_EQ(verdict, std::nullopt) << "cut at " << cut;
      ASSERT_EQ(messages, 1u) << "cut at " << cut;
    }
  }
}

TEST(RaftFrameTest, AcceptsRealStreamsWholeSplitAndByteByByte) {
  for (const RaftFrameVector& vector : kRealStreams) {
    SCOPED_TRACE(vector.name);
    const std::string bytes = Hex(vector);
    for (size_t cut = 0; cut <= bytes.size(); ++cut) {
      auto [verdict, messages] = FeedSplit(bytes, cut);
      ASSERT_EQ(verdict, std::nullopt) << "cut at " << cut;
      ASSERT_EQ(messages, vector.messages) << "cut at " << cut;
    }
    FrameValidator v = Validator();
    for (char c : bytes)
      ASSERT_EQ(v.Feed(absl::string_view(&c, 1)), std::nullopt);
    EXPECT_EQ(v.messages(), vector.messages);
  }
}

TEST(RaftFrameTest, CountsOnlyCompleteMessages) {
  const std::string bytes = Hex(kRealStreams[0]);
  FrameValidator v = Validator();
  ASSERT_EQ(v.Feed(absl::string_view(bytes).substr(0, bytes.size() - 1)),
            std::nullopt);
  EXPECT_EQ(v.messages(), kRealStreams[0].messages - 1);
  ASSERT_EQ(v.Feed(absl::string_view(bytes).substr(bytes.size() - 1)),
            std::nullopt);
  EXPECT_EQ(v.messages(), kRealStreams[0].messages);
}

// The captured group ran at a small term: a receiver far behind still
// accepts it, one far ahead too (terms only matter upwards).
TEST(RaftFrameTest, RealTrafficPassesAtAnyReceiverTerm) {
  for (uint64_t term : {uint64_t{0}, uint64_t{1}, kMax64}) {
    for (const RaftFrameVector& vector : kRealStreams) {
      EXPECT_EQ(FeedAll(Hex(vector), term), std::nullopt) << vector.name;
    }
  }
}

// --- Terms. -----------------------------------------------------------------

TEST(RaftFrameTest, ALaggingReceiverAcceptsTheGroupsMuchHigherTerm) {
  EXPECT_EQ(FeedAll(AppendEntries({}, 10'000), 5), std::nullopt);
  EXPECT_EQ(FeedAll(AppendEntries({}, 5 + (1 << 20)), 5), std::nullopt);
  EXPECT_EQ(FeedAll(AppendEntries({}, 6 + (1 << 20)), 5),
            FrameReject::kTermJump);
  FrameLimits tight;
  tight.max_term_jump = 3;
  EXPECT_EQ(FeedAll(AppendEntries({}, 8), 5, tight), std::nullopt);
  EXPECT_EQ(FeedAll(AppendEntries({}, 9), 5, tight), FrameReject::kTermJump);
}

TEST(RaftFrameTest, TheTermBoundSaturatesInsteadOfWrapping) {
  EXPECT_EQ(FeedAll(AppendEntries({}, kMax64), kMax64 - 10), std::nullopt);
  FrameLimits huge;
  huge.max_term_jump = kMax64;
  EXPECT_EQ(FeedAll(AppendEntries({}, kMax64), 2, huge), std::nullopt);
}

TEST(RaftFrameTest, ReadsTheReceiversTermAtEachMessage) {
  uint64_t term = 1;
  FrameLimits tight;
  tight.max_term_jump = 1;
  FrameValidator v(tight, [&term] { return term; });
  ASSERT_EQ(v.Feed(AppendEntries({}, 2, 1)), std::nullopt);
  term = 9;
  ASSERT_EQ(v.Feed(AppendEntries({}, 10, 9)), std::nullopt);
  EXPECT_EQ(v.Feed(AppendEntries({}, 12, 9)), FrameReject::kTermJump);
}

TEST(RaftFrameTest, EveryTermFieldIsBounded) {
  const uint64_t bad = kMax64;
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"append_entries term", AppendEntries({}, bad)},
      {"append_entries prev_log_term", AppendEntries({}, kTerm, bad)},
      {"entry term", AppendEntries({{kTerm}, {bad}})},
      {"append_entries_result", Message(2, Words({bad, 0, 9}))},
      {"request_vote term", Message(3, Words({bad, 2, 9, kTerm, 0}))},
      {"request_vote last_log_term", Message(3, Words({kTerm, 2, 9, bad, 0}))},
      {"request_vote v1 last_log_term", Message(3, Words({kTerm, 2, 9, bad}))},
      {"request_vote_result", Message(4, Words({bad, 1, 0}))},
      {"request_vote_result v1", Message(4, Words({bad, 1}))},
      {"install_snapshot term", InstallSnapshot(Configuration(kThree), 4, bad)},
      {"install_snapshot last_term",
       InstallSnapshot(Configuration(kThree), 4, kTerm, bad)},
      {"timeout_now term", Message(6, Words({bad, 9, kTerm}))},
      {"timeout_now last_log_term", Message(6, Words({kTerm, 9, bad}))},
  };
  for (const auto& [name, bytes] : cases) {
    EXPECT_EQ(FeedAll(bytes), FrameReject::kTermJump) << name;
  }
}

// --- Types and header lengths.
// ------------------------------------------------

TEST(RaftFrameTest, RefusesUnknownTypes) {
  // 0x10001: libraft decodes the type as a uint16_t, i.e. AppendEntries.
  for (uint64_t type : {uint64_t{0}, uint64_t{7}, uint64_t{0x10001}, kMax64}) {
    EXPECT_EQ(FeedAll(Message(type, Words({kTerm, 0, 0}))),
              FrameReject::kUnknownType)
        << type;
  }
}

TEST(RaftFrameTest, RefusesHeaderLengthsLibraftWouldOverreadOrOverallocate) {
  for (uint64_t type = 1; type <= 6; ++type) {
    SCOPED_TRACE(type);
    // The short header: 8 bytes of 0xff.
    EXPECT_EQ(FeedAll(Message(type, std::string(8, '\xff'))),
              FrameReject::kHeaderLength);
    for (uint64_t length : {uint64_t{0}, uint64_t{1} << 62, kMax64}) {
      std::string preamble;
      Put64(&preamble, type);
      Put64(&preamble, length);
      EXPECT_EQ(FeedAll(preamble), FrameReject::kHeaderLength) << length;
    }
  }
  // Lengths one word off the ones 0.15 sends or still reads.
  EXPECT_EQ(FeedAll(Message(2, Words({kTerm, 0, 9, 0}))),
            FrameReject::kHeaderLength);
  EXPECT_EQ(FeedAll(Message(3, Words({kTerm, 2, 9}))),
            FrameReject::kHeaderLength);
  EXPECT_EQ(FeedAll(Message(3, Words({kTerm, 2, 9, kTerm, 0, 0}))),
            FrameReject::kHeaderLength);
  EXPECT_EQ(FeedAll(Message(4, Words({kTerm}))), FrameReject::kHeaderLength);
  EXPECT_EQ(FeedAll(Message(4, Words({kTerm, 1, 0, 0}))),
            FrameReject::kHeaderLength);
  EXPECT_EQ(FeedAll(Message(6, Words({kTerm, 9}))), FrameReject::kHeaderLength);
  // What 0.15 still decodes: RequestVote and its result without flags.
  EXPECT_EQ(FeedAll(Message(3, Words({kTerm, 2, 9, kTerm}))), std::nullopt);
  EXPECT_EQ(FeedAll(Message(4, Words({kTerm, 1}))), std::nullopt);
}

TEST(RaftFrameTest, AHeaderAboveTheMessageLimitIsRefusedBeforeBuffering) {
  FrameLimits small;
  small.max_message_bytes = 1000;
  std::vector<Entry> entries(100, Entry{kTerm, 1, 0});  // 48 + 1600 bytes
  EXPECT_EQ(FeedAll(AppendEntries(entries), kTerm, small),
            FrameReject::kHeaderLength);
  entries.resize(59);  // 48 + 944
  EXPECT_EQ(FeedAll(AppendEntries(entries), kTerm, small), std::nullopt);
  // InstallSnapshot headers have their own small bound.
  std::string preamble = Words({5, kMaxSnapshotHeaderBytes + 8});
  EXPECT_EQ(FeedAll(preamble), FrameReject::kHeaderLength);
}

// --- AppendEntries.
// -----------------------------------------------------------

TEST(RaftFrameTest, TheEntryCountMustMatchTheHeaderLength) {
  // The crash: header length 40, count 2^32-1.
  std::string crash = Words({kTerm, 7, kTerm, 6, 0xffffffff});
  EXPECT_EQ(FeedAll(Message(1, crash)), FrameReject::kHeaderLength);
  EXPECT_EQ(FeedAll(AppendEntries({}, kTerm, kTerm, 0xffffffff)),
            FrameReject::kEntryCount);
  EXPECT_EQ(FeedAll(AppendEntries({{}, {}}, kTerm, kTerm, 1)),
            FrameReject::kEntryCount);
  EXPECT_EQ(FeedAll(AppendEntries({{}}, kTerm, kTerm, 2)),
            FrameReject::kEntryCount);
  EXPECT_EQ(FeedAll(AppendEntries({{}}, kTerm, kTerm, (uint64_t{1} << 32) + 1)),
            FrameReject::kEntryCount);
  EXPECT_EQ(FeedAll(AppendEntries({{}, {}})), std::nullopt);
}

TEST(RaftFrameTest, EntriesAreCommandsBarriersOrChanges) {
  for (uint8_t type : {1, 2}) {
    EXPECT_EQ(FeedAll(AppendEntries({{kTerm, type, 16}})), std::nullopt);
  }
  EXPECT_EQ(FeedAll(AppendEntries({{kTerm, 3, 0, Configuration(kThree)}})),
            std::nullopt);
  for (uint8_t type : {0, 4, 0xff}) {
    EXPECT_EQ(FeedAll(AppendEntries({{}, {kTerm, type, 8}})),
              FrameReject::kEntryType)
        << int{type};
  }
}

// libraft decodes a change entry's configuration as it appends it: one it
// cannot decode fails the append and leaves the node unavailable.
TEST(RaftFrameTest, ChangeEntriesCarryADecodableConfiguration) {
  const std::string good = Configuration(kThree);
  std::string bad_format = good;
  bad_format[0] = 2;
  const Entry command{kTerm, 1, 24};
  const std::vector<std::pair<const char*, std::vector<Entry>>> refused = {
      {"empty (read through a null pointer)", {{kTerm, 3, 0}}},
      {"too short", {{kTerm, 3, 16}}},
      {"format 2", {command, {kTerm, 3, 0, bad_format}}},
      {"server id 0", {{kTerm, 3, 0, Configuration({{0, "a"}})}}},
      {"second change bad",
       {{kTerm, 3, 0, good}, command, {kTerm, 3, 0, bad_format}, command}},
  };
  for (const auto& [name, entries] : refused) {
    EXPECT_EQ(FeedAll(AppendEntries(entries)), FrameReject::kConfiguration)
        << name;
  }
  const std::string two_changes = AppendEntries(
      {command, {kTerm, 3, 0, good}, command, {kTerm, 3, 0, good}, command});
  for (size_t cut = 0; cut <= two_changes.size(); ++cut) {
    auto [verdict, messages] = FeedSplit(two_changes, cut);
    ASSERT_EQ(verdict, std::nullopt) << "cut at " << cut;
    ASSERT_EQ(messages, 1u) << "cut at " << cut;
  }
  // Bounded memory: a change entry above 64 KiB, more than 256 of them.
  EXPECT_EQ(FeedAll(AppendEntries({{kTerm, 3, (64 << 10) + 8}})),
            FrameReject::kConfiguration);
  std::vector<Entry> many(257, Entry{kTerm, 3, 24});
  EXPECT_EQ(FeedAll(AppendEntries(many, kTerm, kTerm, std::nullopt, false)),
            FrameReject::kConfiguration);
}

TEST(RaftFrameTest, OnlyTheLastNonEmptyEntryMayBeUnpadded) {
  EXPECT_EQ(FeedAll(AppendEntries({{kTerm, 1, 8}, {kTerm, 1, 5}})),
            std::nullopt);
  EXPECT_EQ(FeedAll(AppendEntries({{kTerm, 1, 5}, {kTerm, 1, 0}})),
            std::nullopt);
  EXPECT_EQ(FeedAll(AppendEntries({{kTerm, 1, 5}, {kTerm, 1, 8}})),
            FrameReject::kEntryLength);
  EXPECT_EQ(
      FeedAll(AppendEntries({{kTerm, 1, 5}, {kTerm, 1, 0}, {kTerm, 2, 8}})),
      FrameReject::kEntryLength);
}

TEST(RaftFrameTest, RefusesPayloadsAboveTheLimit) {
  FrameLimits small;
  small.max_message_bytes = 4096;
  // 48 + 16 header bytes: 4032 payload bytes fit, 4033 do not.
  EXPECT_EQ(FeedAll(AppendEntries({{kTerm, 1, 4032}}), kTerm, small),
            std::nullopt);
  EXPECT_EQ(FeedAll(AppendEntries({{kTerm, 1, 4033}}), kTerm, small),
            FrameReject::kTooLarge);
  // Refused from the descriptor, before any payload byte.
  std::string header = Words({kTerm, 7, kTerm, 6, 1, kTerm});
  header.push_back('\x01');
  header.append(3, '\0');
  Put32(&header, 0xffffffff);
  header.append(8, '\0');
  EXPECT_EQ(FeedAll(Message(1, header)), FrameReject::kTooLarge);
  // Entries of 8 MiB each: the ninth crosses the default 64 MiB.
  std::vector<Entry> big(9, Entry{kTerm, 1, 8 << 20});
  EXPECT_EQ(FeedAll(AppendEntries(big, kTerm, kTerm, std::nullopt, false)),
            FrameReject::kTooLarge);
  big.resize(7);
  EXPECT_EQ(FeedAll(AppendEntries(big)), std::nullopt);
}

// --- InstallSnapshot.
// ---------------------------------------------------------

TEST(RaftFrameTest, AcceptsAWellFormedSnapshot) {
  FrameValidator v = Validator();
  ASSERT_EQ(v.Feed(InstallSnapshot(Configuration(kThree), 1000)), std::nullopt);
  ASSERT_EQ(
      v.Feed(InstallSnapshot(Configuration({{1, "a", 0}, {2, "b", 2}}), 0)),
      std::nullopt);
  EXPECT_EQ(v.messages(), 2u);
}

TEST(RaftFrameTest, RefusesConfigurationsLibraftWouldMisread) {
  const std::string good = Configuration(kThree);
  std::string bad_format = good;
  bad_format[0] = 2;
  std::string no_nul = Configuration({{1, "127.0.0.1:7001"}});
  no_nul.resize(8 + 1 + 8 + 14);  // cut inside the address
  no_nul.append(1, 'z');
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"conf length beyond the header",
       InstallSnapshot(good, 4, kTerm, kTerm, good.size() + 8)},
      {"conf length 2^62", InstallSnapshot(good, 4, kTerm, kTerm, 1ull << 62)},
      {"conf length short of the header",
       InstallSnapshot(good, 4, kTerm, kTerm, good.size() - 8)},
      {"format 2", InstallSnapshot(bad_format, 4)},
      {"2^64-1 servers", InstallSnapshot(Configuration(kThree, kMax64), 4)},
      {"one server too many", InstallSnapshot(Configuration(kThree, 4), 4)},
      {"no server", InstallSnapshot(Configuration({}), 4)},
      {"address without NUL", InstallSnapshot(no_nul, 4)},
      {"role 7", InstallSnapshot(Configuration({{1, "a", 7}}), 4)},
      {"server id 0", InstallSnapshot(Configuration({{0, "a"}}), 4)},
      {"fewer servers than encoded",
       InstallSnapshot(Configuration(kThree, 1), 4)},
  };
  for (const auto& [name, bytes] : cases) {
    EXPECT_EQ(FeedAll(bytes), FrameReject::kConfiguration) << name;
  }
}

TEST(RaftFrameTest, RefusesSnapshotDataAboveTheLimit) {
  const std::string conf = Configuration(kThree);
  EXPECT_EQ(FeedAll(InstallSnapshot(conf, 1ull << 62, kTerm, kTerm,
                                    std::nullopt, false)),
            FrameReject::kTooLarge);
  FrameLimits small;
  small.max_message_bytes = 200;
  const uint64_t header = 56 + conf.size();
  EXPECT_EQ(FeedAll(InstallSnapshot(conf, 200 - header), kTerm, small),
            std::nullopt);
  EXPECT_EQ(FeedAll(InstallSnapshot(conf, 201 - header), kTerm, small),
            FrameReject::kTooLarge);
}

// --- The validator itself.
// ----------------------------------------------------

TEST(RaftFrameTest, ARefusalSticks) {
  FrameValidator v = Validator();
  EXPECT_EQ(v.Feed(Message(9, "")), FrameReject::kUnknownType);
  const std::string good = Hex(kRealMessages[0]);
  EXPECT_EQ(v.Feed(good), FrameReject::kUnknownType);
  EXPECT_EQ(v.Feed(""), FrameReject::kUnknownType);
  EXPECT_EQ(v.messages(), 0u);
}

TEST(RaftFrameTest, PayloadBytesAreCountedNotParsed) {
  // A payload that looks like a hostile preamble is still payload.
  std::string evil = Words({1, 40, kMax64, kMax64});
  std::string header = Words({kTerm, 7, kTerm, 6, 1, kTerm});
  header.push_back('\x01');
  header.append(3, '\0');
  Put32(&header, evil.size());
  header.append(8, '\0');
  FrameValidator v = Validator();
  EXPECT_EQ(v.Feed(Message(1, header, evil)), std::nullopt);
  EXPECT_EQ(v.Feed(AppendEntries({})), std::nullopt);
  EXPECT_EQ(v.messages(), 2u);
}

TEST(RaftFrameTest, NamesAreMetricLabels) {
  EXPECT_STREQ(FrameRejectName(FrameReject::kUnknownType), "unknown_type");
  EXPECT_STREQ(FrameRejectName(FrameReject::kHeaderLength), "header_length");
  EXPECT_STREQ(FrameRejectName(FrameReject::kEntryCount), "entry_count");
  EXPECT_STREQ(FrameRejectName(FrameReject::kEntryType), "entry_type");
  EXPECT_STREQ(FrameRejectName(FrameReject::kConfiguration), "configuration");
  EXPECT_STREQ(FrameRejectName(FrameReject::kTooLarge), "too_large");
  EXPECT_STREQ(FrameRejectName(FrameReject::kTermJump), "term_jump");
  EXPECT_STREQ(FrameRejectName(FrameReject::kEntryLength), "entry_length");
}

// Mutated real streams: never a crash, and the verdict and count do not
// depend on how the bytes are split.
TEST(RaftFrameTest, MutatedStreamsGiveTheSameVerdictHoweverSplit) {
  std::mt19937_64 rng(27);
  std::vector<std::string> seeds;
  for (const RaftFrameVector& v : kRealStreams) seeds.push_back(Hex(v));
  for (const RaftFrameVector& v : kRealMessages) seeds.push_back(Hex(v));
  int rejected = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string bytes = seeds[rng() % seeds.size()];
    const int edits = 1 + rng() % 4;
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 4) {
        case 0:
          bytes[at] = static_cast<char>(rng());
          break;
        case 1:
          bytes[at] ^= static_cast<char>(1 << (rng() % 8));
          break;
        case 2:
          bytes.erase(at, 1 + rng() % 16);
          break;
        default:
          bytes.insert(at,
                       std::string(1 + rng() % 16, static_cast<char>(rng())));
      }
    }
    FrameValidator whole = Validator();
    const std::optional<FrameReject> verdict = whole.Feed(bytes);
    FrameValidator pieces = Validator();
    std::optional<FrameReject> split;
    for (size_t at = 0; at < bytes.size();) {
      const size_t n = std::min<size_t>(1 + rng() % 64, bytes.size() - at);
      split = pieces.Feed(absl::string_view(bytes).substr(at, n));
      at += n;
    }
    ASSERT_EQ(verdict, split) << "round " << round;
    ASSERT_EQ(whole.messages(), pieces.messages()) << "round " << round;
    if (verdict) ++rejected;
  }
  // The mutations do reach the checks (else this test proves nothing).
  EXPECT_GT(rejected, 300);
}

}  // namespace
}  // namespace dedup
