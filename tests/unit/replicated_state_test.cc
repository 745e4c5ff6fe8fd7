#include "storage/replicated_state.h"

#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/record.h"
#include "storage/state_dir_swap.h"
#include "storage/storage_key.h"
#include "tests/testing/server_process.h"

namespace dedup {
namespace {

using ::dedup::testing::MakeTempDir;

LogOp BeginOp(const std::string& key, const std::string& owner,
              int64_t lease_ms = 10'000) {
  LogBegin op;
  op.skey = EncodeStorageKey("ns", key);
  op.params.owner = owner;
  op.params.args_hash = "h";
  op.params.lease_ms = lease_ms;
  op.params.ttl_s = 3600;
  return op;
}

LogOp CompleteOp(const std::string& key, uint64_t fence,
                 const std::string& result) {
  LogComplete op;
  op.skey = EncodeStorageKey("ns", key);
  op.params.fence = fence;
  op.params.outcome = Outcome::kSuccess;
  op.params.result = result;
  return op;
}

LogOp GetOp(const std::string& key) {
  return LogGet{EncodeStorageKey("ns", key)};
}

LogEntry Entry(int64_t now_ms, std::vector<LogOp> ops) {
  LogEntry entry;
  entry.now_ms = now_ms;
  entry.ops = std::move(ops);
  return entry;
}

class ReplicatedStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = MakeTempDir("dedup-replicated");
    ASSERT_TRUE(dir.ok());
    dir_ = *dir;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<ReplicatedState> Open(const std::string& name) {
    ReplicatedStateOptions options;
    options.path = dir_ + "/" + name;
    options.memory_budget_bytes = 16 << 20;
    absl::StatusOr<std::unique_ptr<ReplicatedState>> state =
        ReplicatedState::Open(options);
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? *std::move(state) : nullptr;
  }

  std::string dir_;
};

TEST_F(ReplicatedStateTest, DecidesWithTheEntrysTimeAndCountsFences) {
  auto state = Open("a");
  ASSERT_NE(state, nullptr);
  absl::StatusOr<AppliedEntry> a = state->Apply(
      2, Entry(1000, {BeginOp("k", "o1"), BeginOp("k", "o2"), GetOp("k")}));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->answers.size(), 3u);
  const auto& first = std::get<BeginDecision>(a->answers[0]);
  EXPECT_EQ(first.status, BeginStatus::kStarted);
  EXPECT_EQ(first.record.fence, 1u);
  EXPECT_EQ(first.record.created_at_ms, 1000);
  // The second Begin sees the first one's write within the same entry.
  EXPECT_EQ(std::get<BeginDecision>(a->answers[1]).status, BeginStatus::kInUse);
  EXPECT_TRUE(std::get<std::optional<Record>>(a->answers[2]).has_value());
  EXPECT_EQ(state->applied_index(), 2u);
  EXPECT_EQ(state->now_ms(), 1000);
  EXPECT_EQ(state->last_fence(), 1u);

  absl::StatusOr<AppliedEntry> b =
      state->Apply(3, Entry(2000, {CompleteOp("k", 1, "r")}));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(std::get<FencedDecision>(b->answers[0]).status, FencedStatus::kOk);
  ASSERT_EQ(b->settled_keys.size(), 1u);
}

LogOp ForgetOp(const std::string& key) {
  return LogForget{EncodeStorageKey("ns", key)};
}

// An answer as text, every field that reaches a client included.
std::string Describe(const OpAnswer& answer) {
  if (const auto* d = std::get_if<BeginDecision>(&answer)) {
    return absl::StrCat("begin ", static_cast<int>(d->status), " ", d->takeover,
                        d->reentry, " ", EncodeRecord(d->record));
  }
  if (const auto* d = std::get_if<FencedDecision>(&answer)) {
    return absl::StrCat("fenced ", static_cast<int>(d->status), " ",
                        EncodeRecord(d->record));
  }
  if (const auto* r = std::get_if<std::optional<Record>>(&answer)) {
    return r->has_value() ? absl::StrCat("get ", EncodeRecord(**r))
                          : "get none";
  }
  if (const auto* existed = std::get_if<bool>(&answer)) {
    return absl::StrCat("forget ", *existed);
  }
  return std::get<absl::Status>(answer).ToString();
}

// Reads are batched per entry (one MultiGet of its keys, some in the
// memtable, some in SST files, some absent): an entry of many operations,
// several on the same key, must decide exactly as its operations applied one
// entry each.
TEST_F(ReplicatedStateTest, AnEntryDecidesAsItsOperationsOneEntryEach) {
  auto batched = Open("batched");
  auto single = Open("single");
  ASSERT_NE(batched, nullptr);
  ASSERT_NE(single, nullptr);
  std::vector<LogOp> seed;
  for (int k = 0; k < 20; ++k)
    seed.push_back(BeginOp(absl::StrCat("k", k), "o"));
  for (int k = 0; k < 10; ++k) {
    seed.push_back(CompleteOp(absl::StrCat("k", k), k + 1, "r"));
  }
  for (auto* state : {batched.get(), single.get()}) {
    ASSERT_TRUE(state->Apply(2, Entry(1000, seed)).ok());
  }
  // Half the stored records move to SST files; later ones stay in memory.
  ASSERT_TRUE(batched->CompactAll().ok());
  ASSERT_TRUE(single->CompactAll().ok());
  std::vector<LogOp> more;
  for (int k = 20; k < 30; ++k)
    more.push_back(BeginOp(absl::StrCat("k", k), "o"));
  for (auto* state : {batched.get(), single.get()}) {
    ASSERT_TRUE(state->Apply(3, Entry(1000, more)).ok());
  }

  std::mt19937 random(7);
  std::vector<LogOp> ops;
  for (int i = 0; i < 400; ++i) {
    const std::string key = absl::StrCat("k", random() % 40);
    switch (random() % 5) {
      case 0:
        ops.push_back(BeginOp(key, absl::StrCat("o", random() % 2)));
        break;
      case 1:
        ops.push_back(CompleteOp(key, 1 + random() % 40, "done"));
        break;
      case 2:
        ops.push_back(GetOp(key));
        break;
      case 3:
        ops.push_back(ForgetOp(key));
        break;
      default:
        ops.push_back(BeginOp(key, "o", /*lease_ms=*/1));
        break;
    }
  }
  absl::StatusOr<AppliedEntry> all = batched->Apply(4, Entry(5000, ops));
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->answers.size(), ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    absl::StatusOr<AppliedEntry> one =
        single->Apply(4 + i, Entry(5000, {ops[i]}));
    ASSERT_TRUE(one.ok()) << one.status();
    ASSERT_EQ(Describe(all->answers[i]), Describe(one->answers[0]))
        << "operation " << i;
  }
  EXPECT_EQ(batched->last_fence(), single->last_fence());
  // And the same records stay behind.
  std::vector<LogOp> reads;
  for (int k = 0; k < 40; ++k) reads.push_back(GetOp(absl::StrCat("k", k)));
  absl::StatusOr<AppliedEntry> a = batched->Apply(1000, Entry(5000, reads));
  absl::StatusOr<AppliedEntry> b = single->Apply(1000, Entry(5000, reads));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  for (size_t k = 0; k < reads.size(); ++k) {
    EXPECT_EQ(Describe(a->answers[k]), Describe(b->answers[k])) << "k" << k;
  }
}

// A replica that answers nobody (no gate) makes the same state changes as
// one that answers, without building answers or copying stored results.
TEST_F(ReplicatedStateTest, WithoutAGateAnEntryChangesTheSameStateOnly) {
  auto answering = Open("answering");
  auto silent = Open("silent");
  ASSERT_NE(answering, nullptr);
  ASSERT_NE(silent, nullptr);
  const std::string large(64 << 10, 'r');
  std::vector<LogOp> seed;
  for (int k = 0; k < 20; ++k) {
    seed.push_back(BeginOp(absl::StrCat("k", k), "o"));
  }
  for (int k = 0; k < 10; ++k) {
    seed.push_back(CompleteOp(absl::StrCat("k", k), k + 1, large));
  }
  ASSERT_TRUE(answering->Apply(1, Entry(1000, seed)).ok());
  absl::StatusOr<AppliedEntry> quiet =
      silent->Apply(1, Entry(1000, seed), nullptr);
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  EXPECT_TRUE(quiet->answers.empty());

  std::mt19937 random(11);
  for (uint64_t index = 2; index < 6; ++index) {
    std::vector<LogOp> ops;
    for (int i = 0; i < 300; ++i) {
      const std::string key = absl::StrCat("k", random() % 30);
      switch (random() % 4) {
        case 0:
          ops.push_back(BeginOp(key, absl::StrCat("o", random() % 2)));
          break;
        case 1:
          ops.push_back(CompleteOp(key, 1 + random() % 30,
                                   random() % 2 == 0 ? large : "other"));
          break;
        case 2:
          ops.push_back(GetOp(key));
          break;
        default:
          ops.push_back(random() % 8 == 0 ? ForgetOp(key)
                                          : BeginOp(key, "o", 1));
          break;
      }
    }
    const int64_t now = 1000 + static_cast<int64_t>(index) * 500;
    absl::StatusOr<AppliedEntry> a = answering->Apply(index, Entry(now, ops));
    absl::StatusOr<AppliedEntry> b =
        silent->Apply(index, Entry(now, ops), nullptr);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->answers.size(), ops.size());
    EXPECT_TRUE(b->answers.empty());
    EXPECT_EQ(a->settled_keys, b->settled_keys);
  }
  absl::StatusOr<StateDigest> da = answering->ComputeDigest();
  absl::StatusOr<StateDigest> db = silent->ComputeDigest();
  ASSERT_TRUE(da.ok() && db.ok());
  EXPECT_EQ(da->hash, db->hash);
  EXPECT_EQ(da->live_records, db->live_records);
  EXPECT_EQ(answering->last_fence(), silent->last_fence());
  EXPECT_GT(answering->result_bytes_answered(), 0u);
  EXPECT_EQ(silent->result_bytes_answered(), 0u);
}

// Admits the first `left` results, then refuses.
class CountingGate : public ResultGate {
 public:
  explicit CountingGate(int left) : left_(left) {}
  absl::Status Admit(size_t i, size_t bytes) override {
    asked_.push_back(i);
    if (left_ == 0) return absl::UnavailableError("no room");
    --left_;
    return absl::OkStatus();
  }
  std::vector<size_t> asked_;

 private:
  int left_;
};

// An entry naming many keys with large results holds their records
// without the results: none where nobody is answered, and on the answering
// replica only those its gate admits.
TEST_F(ReplicatedStateTest, AnEntryHoldsRecordsWithoutTheirResults) {
  auto answering = Open("answering");
  auto silent = Open("silent");
  ASSERT_NE(answering, nullptr);
  ASSERT_NE(silent, nullptr);
  const std::string large(256 << 10, 'r');
  constexpr int kKeys = 40;
  for (int k = 0; k < kKeys; ++k) {
    const std::string key = absl::StrCat("k", k);
    const LogEntry entry =
        Entry(1000, {BeginOp(key, "o"), CompleteOp(key, k + 1, large)});
    ASSERT_TRUE(answering->Apply(k + 1, entry).ok());
    ASSERT_TRUE(silent->Apply(k + 1, entry, nullptr).ok());
  }
  std::vector<LogOp> reads;
  for (int k = 0; k < kKeys; ++k) {
    reads.push_back(BeginOp(absl::StrCat("k", k), "x"));
  }
  absl::StatusOr<AppliedEntry> quiet =
      silent->Apply(kKeys + 1, Entry(2000, reads), nullptr);
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  EXPECT_LT(quiet->held_record_bytes, kKeys * 1024u);
  CountingGate gate(2);
  absl::StatusOr<AppliedEntry> answered =
      answering->Apply(kKeys + 1, Entry(2000, reads), &gate);
  ASSERT_TRUE(answered.ok()) << answered.status();
  EXPECT_GE(answered->held_record_bytes, 2 * large.size());
  EXPECT_LT(answered->held_record_bytes, 2 * large.size() + kKeys * 1024u);
  for (int k = 0; k < kKeys; ++k) {
    const auto* d = std::get_if<BeginDecision>(&answered->answers[k]);
    if (k < 2) {
      ASSERT_NE(d, nullptr) << k;
      EXPECT_EQ(d->status, BeginStatus::kDuplicate);
      EXPECT_EQ(d->record.result, large);
    } else {
      EXPECT_EQ(d, nullptr) << k;
    }
  }
}

// The gate is asked for each DUPLICATE, in order, and a refusal answers
// the operation instead of its result, which is then never copied.
TEST_F(ReplicatedStateTest, AGateRefusalAnswersInsteadOfTheResult) {
  auto state = Open("state");
  ASSERT_NE(state, nullptr);
  const std::string large(1 << 20, 'r');
  ASSERT_TRUE(state
                  ->Apply(1, Entry(1000, {BeginOp("k", "o"),
                                          CompleteOp("k", 1, large)}))
                  .ok());
  std::vector<LogOp> ops = {BeginOp("fresh", "o")};
  for (int i = 0; i < 100; ++i) ops.push_back(BeginOp("k", "x"));
  ops.push_back(GetOp("k"));
  CountingGate gate(2);
  absl::StatusOr<AppliedEntry> applied =
      state->Apply(2, Entry(2000, ops), &gate);
  ASSERT_TRUE(applied.ok()) << applied.status();
  ASSERT_EQ(applied->answers.size(), ops.size());
  for (size_t i = 1; i <= 100; ++i) {
    if (i <= 2) {
      const auto* d = std::get_if<BeginDecision>(&applied->answers[i]);
      ASSERT_NE(d, nullptr) << i;
      EXPECT_EQ(d->status, BeginStatus::kDuplicate);
      EXPECT_EQ(d->record.result, large);
    } else {
      EXPECT_EQ(Describe(applied->answers[i]),
                absl::UnavailableError("no room").ToString())
          << i;
    }
  }
  std::vector<size_t> duplicates;
  for (size_t i = 1; i <= 100; ++i) duplicates.push_back(i);
  EXPECT_EQ(gate.asked_, duplicates);
  // A Get is answered whole (one caller, one result).
  const auto* got = std::get_if<std::optional<Record>>(&applied->answers[101]);
  ASSERT_NE(got, nullptr);
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->result, large);
  EXPECT_EQ(state->result_bytes_answered(), 3 * large.size());
}

// Lease statistics come from memory (seeded by a scan after each open), so
// waits here are for that scan, bounded.
StoreStats SeededStats(ReplicatedState& state) {
  StoreStats stats = state.Stats();
  for (int i = 0; i < 500 && stats.inflight_tracking_saturated; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stats = state.Stats();
  }
  return stats;
}

TEST_F(ReplicatedStateTest, LeaseFiguresFollowAppliedEntriesAndReopens) {
  {
    auto state = Open("a");
    ASSERT_NE(state, nullptr);
    ASSERT_TRUE(
        state
            ->Apply(2, Entry(1000, {BeginOp("k1", "o", 10'000),
                                    BeginOp("k2", "o", 500), BeginOp("k3", "o"),
                                    CompleteOp("k3", 3, "r")}))
            .ok());
    StoreStats stats = SeededStats(*state);
    EXPECT_FALSE(stats.inflight_tracking_saturated);
    EXPECT_EQ(stats.inflight_leases, 2u);  // k1, k2 (k3 completed)
    EXPECT_EQ(stats.lapsed_leases, 0u);
    // Replicated time moves on: k2's lease (until 1,500) has lapsed.
    ASSERT_TRUE(state->Apply(3, Entry(5000, {GetOp("k1")})).ok());
    stats = state->Stats();
    EXPECT_EQ(stats.inflight_leases, 1u);
    EXPECT_EQ(stats.lapsed_leases, 1u);
    EXPECT_EQ(stats.oldest_lapsed_lease_ms, 3500);
    // A takeover ends the lapse.
    ASSERT_TRUE(state->Apply(4, Entry(5000, {BeginOp("k2", "other")})).ok());
    stats = state->Stats();
    EXPECT_EQ(stats.inflight_leases, 2u);
    EXPECT_EQ(stats.lapsed_leases, 0u);
    ASSERT_TRUE(state->Apply(5, Entry(6000, {GetOp("k1")})).ok());
  }
  // After a restart the scan finds the same leases.
  auto state = Open("a");
  ASSERT_NE(state, nullptr);
  StoreStats stats = SeededStats(*state);
  EXPECT_FALSE(stats.inflight_tracking_saturated);
  EXPECT_EQ(stats.inflight_leases, 2u);  // k1 until 11,000; k2 (other)
  EXPECT_EQ(stats.lapsed_leases, 0u);
}

TEST_F(ReplicatedStateTest, ReplicatedTimeNeverGoesBackwards) {
  auto state = Open("a");
  ASSERT_NE(state, nullptr);
  ASSERT_TRUE(state->Apply(2, Entry(10'000, {BeginOp("k", "o", 500)})).ok());
  // A new leader whose clock is behind: the lease (until 10,500) is still
  // live at replicated time 10,000, so another owner is IN_USE, not a
  // takeover.
  absl::StatusOr<AppliedEntry> late =
      state->Apply(3, Entry(1, {BeginOp("k", "other")}));
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->now_ms, 10'000);
  EXPECT_EQ(std::get<BeginDecision>(late->answers[0]).status,
            BeginStatus::kInUse);
  EXPECT_EQ(state->now_ms(), 10'000);
}

TEST_F(ReplicatedStateTest, SkipsEntriesAtOrBelowTheAppliedIndex) {
  auto state = Open("a");
  ASSERT_NE(state, nullptr);
  ASSERT_TRUE(state->Apply(5, Entry(1000, {BeginOp("k", "o")})).ok());
  absl::StatusOr<AppliedEntry> again =
      state->Apply(5, Entry(1000, {BeginOp("k2", "o")}));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->skipped);
  EXPECT_TRUE(again->answers.empty());
  EXPECT_EQ(state->last_fence(), 1u);
}

TEST_F(ReplicatedStateTest, MetadataAndRecordsSurviveAReopen) {
  {
    auto state = Open("a");
    ASSERT_NE(state, nullptr);
    ASSERT_TRUE(state->Apply(7, Entry(5000, {BeginOp("k", "o")})).ok());
    ASSERT_TRUE(state->SyncWal().ok());
    ASSERT_TRUE(state->Close().ok());
  }
  auto state = Open("a");
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(state->applied_index(), 7u);
  EXPECT_EQ(state->now_ms(), 5000);
  EXPECT_EQ(state->last_fence(), 1u);
  // Fences keep rising from the replicated counter.
  absl::StatusOr<AppliedEntry> next =
      state->Apply(8, Entry(5001, {BeginOp("k2", "o")}));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(std::get<BeginDecision>(next->answers[0]).record.fence, 2u);
}

TEST_F(ReplicatedStateTest, ReplicasThatApplyTheSameEntriesHaveOneDigest) {
  auto a = Open("a");
  auto b = Open("b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (uint64_t i = 2; i < 50; ++i) {
    const LogEntry entry =
        Entry(1000 + static_cast<int64_t>(i),
              {BeginOp("k" + std::to_string(i % 7), "o" + std::to_string(i)),
               CompleteOp("k" + std::to_string(i % 5), i / 3, "r")});
    ASSERT_TRUE(a->Apply(i, entry).ok());
    ASSERT_TRUE(b->Apply(i, entry).ok());
  }
  absl::StatusOr<StateDigest> da = a->ComputeDigest();
  absl::StatusOr<StateDigest> db = b->ComputeDigest();
  ASSERT_TRUE(da.ok() && db.ok());
  EXPECT_EQ(da->applied_index, 49u);
  EXPECT_EQ(da->hash, db->hash);
  EXPECT_EQ(da->live_records, db->live_records);
  // One more entry on one replica only: the digests differ.
  ASSERT_TRUE(a->Apply(50, Entry(2000, {BeginOp("new", "o")})).ok());
  EXPECT_NE(a->ComputeDigest()->hash, db->hash);
}

TEST_F(ReplicatedStateTest, CheckpointHoldsTheStateAtItsIndex) {
  auto state = Open("a");
  ASSERT_NE(state, nullptr);
  ASSERT_TRUE(state->Apply(9, Entry(1000, {BeginOp("k", "o")})).ok());
  absl::StatusOr<uint64_t> index = state->Checkpoint(dir_ + "/copy");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(*index, 9u);
  absl::StatusOr<uint64_t> read =
      ReplicatedState::AppliedIndexOf(dir_ + "/copy");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, 9u);
}

TEST_F(ReplicatedStateTest, ReplaceWithInstallsAnotherReplicasCheckpoint) {
  auto ahead = Open("ahead");
  auto behind = Open("behind");
  ASSERT_NE(ahead, nullptr);
  ASSERT_NE(behind, nullptr);
  ASSERT_TRUE(behind->Apply(1, Entry(1000, {BeginOp("old", "o")})).ok());
  ASSERT_TRUE(ahead->Apply(1, Entry(1000, {BeginOp("old", "o")})).ok());
  ASSERT_TRUE(ahead->Apply(2, Entry(5000, {BeginOp("k", "o")})).ok());
  ASSERT_TRUE(ahead->Apply(3, Entry(6000, {CompleteOp("k", 2, "r")})).ok());
  ASSERT_TRUE(ahead->Checkpoint(behind->IncomingDir()).ok());

  ASSERT_TRUE(behind->ReplaceWith(behind->IncomingDir()).ok());
  EXPECT_EQ(behind->applied_index(), 3u);
  EXPECT_EQ(behind->now_ms(), 6000);
  EXPECT_EQ(behind->last_fence(), 2u);
  EXPECT_FALSE(std::filesystem::exists(behind->IncomingDir()));
  EXPECT_EQ(behind->ComputeDigest()->hash, ahead->ComputeDigest()->hash);
  // It goes on from there: the next entry numbers the next fence, and the
  // installed state is what a reopen finds.
  absl::StatusOr<AppliedEntry> next =
      behind->Apply(4, Entry(7000, {BeginOp("n", "o")}));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(std::get<BeginDecision>(next->answers[0]).record.fence, 3u);
  ASSERT_TRUE(behind->Close().ok());
  behind.reset();
  auto reopened = Open("behind");
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->applied_index(), 4u);
  absl::StatusOr<AppliedEntry> read =
      reopened->Apply(5, Entry(7000, {GetOp("k")}));
  ASSERT_TRUE(read.ok());
  const auto& record = std::get<std::optional<Record>>(read->answers[0]);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->result, "r");
}

TEST_F(ReplicatedStateTest, SetMemberRecordsAClientAddressEveryReplicaKeeps) {
  {
    auto state = Open("a");
    ASSERT_NE(state, nullptr);
    LogSetMember member;
    member.member_id = 4;
    member.client_address = "10.0.0.4:50051";
    absl::StatusOr<AppliedEntry> applied =
        state->Apply(1, Entry(1000, {member, BeginOp("k", "o")}));
    ASSERT_TRUE(applied.ok()) << applied.status();
    EXPECT_TRUE(applied->members_changed);
    ASSERT_EQ(applied->answers.size(), 2u);
    EXPECT_TRUE(std::get<bool>(applied->answers[0]));
    // It is not a record: the key's Begin starts the first fence.
    EXPECT_EQ(std::get<BeginDecision>(applied->answers[1]).record.fence, 1u);
  }
  auto reopened = Open("a");
  ASSERT_NE(reopened, nullptr);
  absl::StatusOr<std::map<uint64_t, std::string>> members = reopened->Members();
  ASSERT_TRUE(members.ok()) << members.status();
  EXPECT_EQ(*members, (std::map<uint64_t, std::string>{{4, "10.0.0.4:50051"}}));
}

// A crash between the swap's two renames leaves `<dir>.old` and
// `<dir>.incoming`: the next open takes the incoming copy, which was
// complete.
TEST_F(ReplicatedStateTest, OpenFinishesASwapACrashInterrupted) {
  auto ahead = Open("ahead");
  auto behind = Open("behind");
  ASSERT_NE(ahead, nullptr);
  ASSERT_NE(behind, nullptr);
  ASSERT_TRUE(behind->Apply(1, Entry(1000, {BeginOp("k", "o")})).ok());
  ASSERT_TRUE(ahead->Apply(7, Entry(1000, {BeginOp("k", "o")})).ok());
  const std::string path = dir_ + "/behind";
  ASSERT_TRUE(ahead->Checkpoint(IncomingDirOf(path)).ok());
  ASSERT_TRUE(behind->Close().ok());
  behind.reset();
  std::filesystem::rename(path, path + ".old");
  auto recovered = Open("behind");
  ASSERT_NE(recovered, nullptr);
  EXPECT_EQ(recovered->applied_index(), 7u);
  EXPECT_FALSE(std::filesystem::exists(path + ".old"));
  EXPECT_FALSE(std::filesystem::exists(IncomingDirOf(path)));
}

// A fetch cut short (the old state still in place) is discarded.
TEST_F(ReplicatedStateTest, OpenDiscardsAPartialFetch) {
  const std::string path = dir_ + "/a";
  {
    auto state = Open("a");
    ASSERT_NE(state, nullptr);
    ASSERT_TRUE(state->Apply(4, Entry(1000, {BeginOp("k", "o")})).ok());
  }
  std::filesystem::create_directories(IncomingDirOf(path));
  auto state = Open("a");
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(state->applied_index(), 4u);
  EXPECT_FALSE(std::filesystem::exists(IncomingDirOf(path)));
}

}  // namespace
}  // namespace dedup
