#include "replication/raft_log_probe.h"

#include <uv.h>

// libraft 0.15's headers declare C functions without extern "C".
extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>

#include "absl/strings/str_cat.h"
#include "replication/raft_codes.h"
#include "replication/raft_offline_io.h"
#include "replication/raft_trace.h"

namespace dedup {
namespace {

uint64_t Le64(const unsigned char* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

std::vector<Member> MembersOf(const struct raft_configuration& conf) {
  std::vector<Member> members;
  for (unsigned i = 0; i < conf.n; ++i) {
    Member member;
    member.id = conf.servers[i].id;
    member.raft_address =
        conf.servers[i].address != nullptr ? conf.servers[i].address : "";
    member.role = FromRaftRole(conf.servers[i].role);
    members.push_back(std::move(member));
  }
  return members;
}

// The summary of what load returned: the last configuration entry wins
// over the snapshot's.
absl::StatusOr<RaftLogSummary> Summarize(raft_term term,
                                         const struct raft_snapshot* snapshot,
                                         raft_index start,
                                         const struct raft_entry* entries,
                                         size_t n) {
  RaftLogSummary summary;
  summary.current_term = term;
  if (snapshot != nullptr) {
    summary.last_index = snapshot->index;
    summary.last_term = snapshot->term;
    summary.max_term = snapshot->term;
    summary.members = MembersOf(snapshot->configuration);
    summary.config_index = snapshot->configuration_index;
  }
  if (n > 0) {
    summary.last_index = start + n - 1;
    summary.last_term = entries[n - 1].term;
  }
  for (size_t i = 0; i < n; ++i) {
    summary.max_term = std::max<uint64_t>(summary.max_term, entries[i].term);
  }
  for (size_t i = n; i-- > 0;) {
    if (entries[i].type != RAFT_CHANGE) continue;
    absl::StatusOr<std::vector<Member>> members =
        DecodeRaftConfiguration(absl::string_view(
            static_cast<const char*>(entries[i].buf.base), entries[i].buf.len));
    if (!members.ok()) {
      return absl::DataLossError(absl::StrCat(
          "configuration entry ", start + i, ": ", members.status().message()));
    }
    summary.members = *std::move(members);
    summary.config_index = start + i;
    break;
  }
  return summary;
}

bool Pristine(const std::string& dir) {
  std::error_code ec;
  return !std::filesystem::exists(std::filesystem::path(dir) / "metadata1",
                                  ec) &&
         !std::filesystem::exists(std::filesystem::path(dir) / "metadata2", ec);
}

}  // namespace

void FreeLoaded(struct raft_snapshot* snapshot, struct raft_entry* entries,
                size_t n) {
  std::set<void*> batches;
  for (size_t i = 0; i < n; ++i) {
    if (entries[i].batch != nullptr) {
      batches.insert(entries[i].batch);
    } else {
      raft_free(entries[i].buf.base);
    }
  }
  for (void* batch : batches) raft_free(batch);
  if (entries != nullptr) raft_free(entries);
  if (snapshot != nullptr) {
    for (unsigned i = 0; i < snapshot->n_bufs; ++i) {
      raft_free(snapshot->bufs[i].base);
    }
    raft_free(snapshot->bufs);
    raft_configuration_close(&snapshot->configuration);
    raft_free(snapshot);
  }
}

absl::Status WithRaftIo(
    const std::string& dir, uint64_t id, const std::string& raft_address,
    const std::function<void(struct raft_io&, uv_loop_t&)>& action) {
  uv_loop_t loop;
  if (int rv = uv_loop_init(&loop); rv != 0) {
    return absl::InternalError(absl::StrCat("uv_loop_init: ", uv_strerror(rv)));
  }
  struct raft_uv_transport transport {};
  struct raft_io io {};
  if (int rv = raft_uv_tcp_init(&transport, &loop); rv != 0) {
    uv_loop_close(&loop);
    return absl::InternalError(absl::StrCat("raft transport: ", rv));
  }
  absl::Status status;
  if (raft_uv_init(&io, &loop, dir.c_str(), &transport) != 0) {
    raft_uv_tcp_close(&transport);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return absl::InvalidArgumentError(
        absl::StrCat("raft log in ", dir, ": ", io.errmsg));
  }
  raft_uv_set_tracer(&io, RaftLogTracer());
  if (io.init(&io, id, raft_address.c_str()) != 0) {
    status = absl::InvalidArgumentError(
        absl::StrCat("raft log in ", dir, ": ", io.errmsg));
  } else {
    action(io, loop);
    io.close(&io, nullptr);
    uv_run(&loop, UV_RUN_DEFAULT);
  }
  raft_uv_close(&io);
  raft_uv_tcp_close(&transport);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return status;
}

absl::StatusOr<std::vector<Member>> DecodeRaftConfiguration(
    absl::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t size = bytes.size();
  if (size < 9 || p[0] != 1) {
    return absl::DataLossError("not a libraft configuration (format 1)");
  }
  const uint64_t n = Le64(p + 1);
  size_t at = 9;
  std::vector<Member> members;
  for (uint64_t i = 0; i < n; ++i) {
    if (size - at < 8) return absl::DataLossError("configuration truncated");
    Member member;
    member.id = Le64(p + at);
    at += 8;
    const void* nul = std::memchr(p + at, '\0', size - at);
    if (nul == nullptr ||
        static_cast<const unsigned char*>(nul) + 1 >= p + size) {
      return absl::DataLossError("configuration truncated");
    }
    const size_t length = static_cast<const unsigned char*>(nul) - (p + at);
    member.raft_address.assign(reinterpret_cast<const char*>(p + at), length);
    at += length + 1;
    member.role = FromRaftRole(p[at++]);
    members.push_back(std::move(member));
  }
  return members;
}

absl::StatusOr<RaftLogSummary> ReadRaftLog(const std::string& dir, uint64_t id,
                                           const std::string& raft_address) {
  if (Pristine(dir)) return RaftLogSummary();
  absl::StatusOr<RaftLogSummary> summary =
      absl::InternalError("raft log not read");
  absl::Status io_status =
      WithRaftIo(dir, id, raft_address, [&](struct raft_io& io, uv_loop_t&) {
        raft_term term = 0;
        raft_id voted_for = 0;
        struct raft_snapshot* snapshot = nullptr;
        raft_index start = 0;
        struct raft_entry* entries = nullptr;
        size_t n = 0;
        if (io.load(&io, &term, &voted_for, &snapshot, &start, &entries, &n) !=
            0) {
          summary = absl::DataLossError(
              absl::StrCat("raft log in ", dir, ": ", io.errmsg));
          return;
        }
        summary = Summarize(term, snapshot, start, entries, n);
        FreeLoaded(snapshot, entries, n);
      });
  if (!io_status.ok()) return io_status;
  return summary;
}

absl::Status SetRaftTerm(const std::string& dir, uint64_t id,
                         const std::string& raft_address, uint64_t term) {
  absl::Status result;
  absl::Status io_status =
      WithRaftIo(dir, id, raft_address, [&](struct raft_io& io, uv_loop_t&) {
        if (io.set_term(&io, term) != 0) {
          result = absl::UnavailableError(
              absl::StrCat("raft term in ", dir, ": ", io.errmsg));
        }
      });
  return io_status.ok() ? result : io_status;
}

std::string DescribeMembers(const std::vector<Member>& members) {
  std::string out;
  for (const Member& member : members) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", member.id, " ",
                    MemberRoleName(member.role), " ", member.raft_address);
  }
  return out.empty() ? "(none)" : out;
}

}  // namespace dedup
