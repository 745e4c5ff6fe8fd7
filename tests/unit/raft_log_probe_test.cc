// ReadRaftLog and DecodeRaftConfiguration against logs that libraft 0.15
// itself wrote (bootstrap, and raft_recover's forced configuration).
#include "replication/raft_log_probe.h"

#include <uv.h>

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

#include <filesystem>
#include <functional>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/server_process.h"

namespace dedup {
namespace {

// Three servers, one per role.
struct raft_configuration ThreeRoles() {
  struct raft_configuration conf;
  raft_configuration_init(&conf);
  EXPECT_EQ(raft_configuration_add(&conf, 1, "127.0.0.1:7001", RAFT_VOTER), 0);
  EXPECT_EQ(raft_configuration_add(&conf, 2, "127.0.0.2:7002", RAFT_STANDBY),
            0);
  EXPECT_EQ(raft_configuration_add(&conf, 70000, "10.1.2.3:65535", RAFT_SPARE),
            0);
  return conf;
}

// Runs `action` on libraft's disk I/O for `dir`, as node 1.
void WithIo(const std::string& dir,
            const std::function<void(struct raft_io&)>& action) {
  uv_loop_t loop;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  struct raft_uv_transport transport {};
  struct raft_io io {};
  ASSERT_EQ(raft_uv_tcp_init(&transport, &loop), 0);
  ASSERT_EQ(raft_uv_init(&io, &loop, dir.c_str(), &transport), 0);
  ASSERT_EQ(io.init(&io, 1, "127.0.0.1:7001"), 0) << io.errmsg;
  action(io);
  io.close(&io, nullptr);
  uv_run(&loop, UV_RUN_DEFAULT);
  raft_uv_close(&io);
  raft_uv_tcp_close(&transport);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
}

TEST(DecodeRaftConfigurationTest, ReadsWhatLibraftEncodes) {
  struct raft_configuration conf = ThreeRoles();
  struct raft_buffer buf;
  ASSERT_EQ(raft_configuration_encode(&conf, &buf), 0);
  absl::StatusOr<std::vector<Member>> members = DecodeRaftConfiguration(
      absl::string_view(static_cast<const char*>(buf.base), buf.len));
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_EQ(members->size(), 3u);
  EXPECT_EQ((*members)[0].id, 1u);
  EXPECT_EQ((*members)[0].raft_address, "127.0.0.1:7001");
  EXPECT_EQ((*members)[0].role, MemberRole::kVoter);
  EXPECT_EQ((*members)[1].id, 2u);
  EXPECT_EQ((*members)[1].role, MemberRole::kStandby);
  EXPECT_EQ((*members)[2].id, 70000u);
  EXPECT_EQ((*members)[2].raft_address, "10.1.2.3:65535");
  EXPECT_EQ((*members)[2].role, MemberRole::kSpare);
  EXPECT_EQ(DescribeMembers(*members),
            "1 voter 127.0.0.1:7001, 2 standby 127.0.0.2:7002, 70000 spare "
            "10.1.2.3:65535");

  // Cut anywhere inside the servers: an error, never a read past the end.
  const std::string whole(static_cast<const char*>(buf.base), buf.len);
  for (size_t cut = 0; cut < 9 + 8 + 15 + 1; ++cut) {
    EXPECT_FALSE(DecodeRaftConfiguration(whole.substr(0, cut)).ok()) << cut;
  }
  raft_free(buf.base);
  raft_configuration_close(&conf);
}

TEST(ReadRaftLogTest, PristineDirHasNoLog) {
  absl::StatusOr<std::string> dir = testing::MakeTempDir("probe");
  ASSERT_TRUE(dir.ok());
  absl::StatusOr<RaftLogSummary> summary =
      ReadRaftLog(*dir, 1, "127.0.0.1:7001");
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->last_index, 0u);
  EXPECT_TRUE(summary->members.empty());
  std::filesystem::remove_all(*dir);
}

// raft_recover (io->recover) appends the forced configuration after the
// last entry, as a closed segment holding one entry of term 1, and leaves
// the persisted term alone: what recovery.cc relies on and logs.
TEST(ReadRaftLogTest, SeesBootstrapThenTheForcedConfiguration) {
  absl::StatusOr<std::string> dir = testing::MakeTempDir("probe");
  ASSERT_TRUE(dir.ok());
  WithIo(*dir, [](struct raft_io& io) {
    struct raft_configuration conf = ThreeRoles();
    EXPECT_EQ(io.bootstrap(&io, &conf), 0) << io.errmsg;
    EXPECT_EQ(io.set_term(&io, 5), 0) << io.errmsg;
    raft_configuration_close(&conf);
  });
  absl::StatusOr<RaftLogSummary> before =
      ReadRaftLog(*dir, 1, "127.0.0.1:7001");
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->current_term, 5u);
  EXPECT_EQ(before->last_index, 1u);
  EXPECT_EQ(before->last_term, 1u);
  ASSERT_EQ(before->members.size(), 3u);
  EXPECT_EQ(before->members[1].role, MemberRole::kStandby);

  WithIo(*dir, [](struct raft_io& io) {
    struct raft_configuration alone;
    raft_configuration_init(&alone);
    EXPECT_EQ(raft_configuration_add(&alone, 1, "127.0.0.1:7001", RAFT_VOTER),
              0);
    EXPECT_EQ(io.recover(&io, &alone), 0) << io.errmsg;
    raft_configuration_close(&alone);
  });
  absl::StatusOr<RaftLogSummary> after = ReadRaftLog(*dir, 1, "127.0.0.1:7001");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->current_term, 5u);
  EXPECT_EQ(after->last_index, 2u);
  EXPECT_EQ(after->last_term, 1u);
  EXPECT_EQ(after->max_term, 1u);
  EXPECT_EQ(before->config_index, 1u);
  EXPECT_EQ(after->config_index, 2u);
  ASSERT_EQ(after->members.size(), 1u);
  EXPECT_EQ(after->members[0].id, 1u);
  EXPECT_EQ(after->members[0].role, MemberRole::kVoter);
  std::filesystem::remove_all(*dir);
}

TEST(SetRaftTermTest, PersistsTheTerm) {
  absl::StatusOr<std::string> dir = testing::MakeTempDir("probe");
  ASSERT_TRUE(dir.ok());
  WithIo(*dir, [](struct raft_io& io) {
    struct raft_configuration conf = ThreeRoles();
    EXPECT_EQ(io.bootstrap(&io, &conf), 0) << io.errmsg;
    EXPECT_EQ(io.set_term(&io, ~uint64_t{0}), 0) << io.errmsg;
    raft_configuration_close(&conf);
  });
  absl::StatusOr<RaftLogSummary> before =
      ReadRaftLog(*dir, 1, "127.0.0.1:7001");
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->current_term, ~uint64_t{0});
  ASSERT_TRUE(SetRaftTerm(*dir, 1, "127.0.0.1:7001", 3).ok());
  absl::StatusOr<RaftLogSummary> after = ReadRaftLog(*dir, 1, "127.0.0.1:7001");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->current_term, 3u);
  EXPECT_EQ(after->last_index, 1u);
  std::filesystem::remove_all(*dir);
}

}  // namespace
}  // namespace dedup
