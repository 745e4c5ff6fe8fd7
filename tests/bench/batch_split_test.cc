#include "bench/load/batch_split.h"

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace dedup::bench {
namespace {

TEST(SplitByGroupTest, GroupsInOrderOfFirstItemWithItemsInBatchOrder) {
  const std::vector<uint32_t> groups = {4, 1, 4, 0, 1, 4};
  const std::vector<BatchSlice> slices =
      SplitByGroup(groups.size(), [&](size_t i) { return groups[i]; });
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0].group, 4u);
  EXPECT_EQ(slices[0].items, (std::vector<size_t>{0, 2, 5}));
  EXPECT_EQ(slices[1].group, 1u);
  EXPECT_EQ(slices[1].items, (std::vector<size_t>{1, 4}));
  EXPECT_EQ(slices[2].group, 0u);
  EXPECT_EQ(slices[2].items, (std::vector<size_t>{3}));
}

TEST(SplitByGroupTest, OneGroupIsOneSliceAndNoItemsNone) {
  const auto one = SplitByGroup(3, [](size_t) { return 7u; });
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].items, (std::vector<size_t>{0, 1, 2}));
  EXPECT_TRUE(SplitByGroup(0, [](size_t) { return 0u; }).empty());
}

TEST(PickTest, TakesTheSliceItemsInOrder) {
  const std::vector<std::string> all = {"a", "b", "c", "d"};
  EXPECT_EQ(Pick(all, BatchSlice{0, {3, 1}}),
            (std::vector<std::string>{"d", "b"}));
}

BeginAnswer Fenced(uint64_t fence) {
  BeginAnswer a;
  a.fence = fence;
  return a;
}

TEST(SliceJoinTest, AnswersLandAtTheirItemsAndDoneRunsOnceAtTheLast) {
  const std::vector<BatchSlice> slices = {{2, {0, 2}}, {5, {1, 3}}};
  int calls = 0;
  std::vector<BeginAnswer> got;
  SliceJoin<BeginAnswer> join(4, slices.size(),
                              [&](std::vector<BeginAnswer> all) {
                                ++calls;
                                got = std::move(all);
                              });
  join.Answer(slices[1], {Fenced(11), Fenced(13)});
  EXPECT_EQ(calls, 0);
  join.Answer(slices[0], {Fenced(10), Fenced(12)});
  ASSERT_EQ(calls, 1);
  ASSERT_EQ(got.size(), 4u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].fence, 10 + i) << i;
    EXPECT_TRUE(got[i].error.empty()) << i;
  }
}

TEST(SliceJoinTest, AFailedSliceGivesEachOfItsItemsTheError) {
  const std::vector<BatchSlice> slices = {{0, {0}}, {1, {1, 2}}};
  std::vector<FencedAnswer> got;
  SliceJoin<FencedAnswer> join(
      3, slices.size(), [&](std::vector<FencedAnswer> all) { got = all; });
  FencedAnswer failed;
  failed.error = "grpc 14: down";
  join.Answer(slices[1], {failed});  // one answer for two items: the RPC's
  join.Answer(slices[0], {FencedAnswer{}});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(got[0].error.empty());
  EXPECT_EQ(got[1].error, "grpc 14: down");
  EXPECT_EQ(got[2].error, "grpc 14: down");
}

TEST(SliceJoinTest, AWrongCountWithoutErrorIsAnErrorToo) {
  std::vector<BeginAnswer> got;
  SliceJoin<BeginAnswer> join(2, 1,
                              [&](std::vector<BeginAnswer> all) { got = all; });
  join.Answer(BatchSlice{3, {0, 1}}, {Fenced(1)});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].error, "group 3 answered 1 items for 2");
  EXPECT_EQ(got[1].error, got[0].error);
}

TEST(SliceJoinTest, ConcurrentSlicesCompleteOnce) {
  constexpr int kSlices = 8;
  for (int round = 0; round < 200; ++round) {
    std::vector<BatchSlice> slices;
    for (int s = 0; s < kSlices; ++s) {
      slices.push_back(
          BatchSlice{static_cast<uint32_t>(s), {static_cast<size_t>(s)}});
    }
    std::atomic<int> calls{0};
    std::vector<BeginAnswer> got;
    SliceJoin<BeginAnswer> join(kSlices, kSlices,
                                [&](std::vector<BeginAnswer> all) {
                                  ++calls;
                                  got = std::move(all);
                                });
    std::vector<std::thread> threads;
    for (int s = 0; s < kSlices; ++s) {
      threads.emplace_back(
          [&, s] { join.Answer(slices[s], {Fenced(100 + s)}); });
    }
    for (std::thread& t : threads) t.join();
    ASSERT_EQ(calls.load(), 1);
    for (int s = 0; s < kSlices; ++s) ASSERT_EQ(got[s].fence, 100u + s);
  }
}

}  // namespace
}  // namespace dedup::bench
