#include "replication/raft_seed.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "replication/raft_offline_io.h"

namespace dedup {
namespace {

// The term of the seed's snapshot and of its metadata: a new group's.
constexpr raft_term kSeedTerm = 1;

struct PutState {
  bool done = false;
  int status = 0;
};

void PutDone(struct raft_io_snapshot_put* req, int status) {
  auto* state = static_cast<PutState*>(req->data);
  state->done = true;
  state->status = status;
}

// io.load on a pristine log: nothing in it.
absl::Status CheckPristine(struct raft_io& io, const std::string& dir) {
  raft_term term = 0;
  raft_id voted_for = 0;
  struct raft_snapshot* snapshot = nullptr;
  raft_index start = 0;
  struct raft_entry* entries = nullptr;
  size_t n = 0;
  if (io.load(&io, &term, &voted_for, &snapshot, &start, &entries, &n) != 0) {
    return absl::DataLossError(
        absl::StrCat("raft log in ", dir, ": ", io.errmsg));
  }
  const bool pristine = term == 0 && snapshot == nullptr && n == 0;
  FreeLoaded(snapshot, entries, n);
  if (!pristine) {
    return absl::FailedPreconditionError(
        absl::StrCat("raft log in ", dir, " is not empty"));
  }
  return absl::OkStatus();
}

absl::Status PutSnapshot(struct raft_io& io, uv_loop_t& loop,
                         const std::string& dir, uint64_t id,
                         const std::string& raft_address, uint64_t index,
                         const std::string& data) {
  struct raft_snapshot snapshot {};
  snapshot.index = index;
  snapshot.term = kSeedTerm;
  snapshot.configuration_index = index;
  raft_configuration_init(&snapshot.configuration);
  if (raft_configuration_add(&snapshot.configuration, id, raft_address.c_str(),
                             RAFT_VOTER) != 0) {
    raft_configuration_close(&snapshot.configuration);
    return absl::InternalError("raft configuration: out of memory");
  }
  struct raft_buffer buffer {};
  buffer.len = data.size();
  buffer.base = raft_malloc(data.size());
  std::memcpy(buffer.base, data.data(), data.size());
  snapshot.bufs = &buffer;
  snapshot.n_bufs = 1;
  PutState state;
  struct raft_io_snapshot_put request {};
  request.data = &state;
  // trailing 0: installed as the whole log (nothing before it is kept).
  int rv = io.snapshot_put(&io, 0, &request, &snapshot, &PutDone);
  while (rv == 0 && !state.done) uv_run(&loop, UV_RUN_ONCE);
  raft_free(buffer.base);
  raft_configuration_close(&snapshot.configuration);
  if (rv != 0 || state.status != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot write the seed snapshot into ", dir, ": ", io.errmsg));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SeedRaftLog(const std::string& dir, uint64_t id,
                         const std::string& raft_address, uint64_t index,
                         const std::string& snapshot_data) {
  absl::Status result;
  absl::Status io_status = WithRaftIo(
      dir, id, raft_address, [&](struct raft_io& io, uv_loop_t& loop) {
        result = CheckPristine(io, dir);
        if (!result.ok()) return;
        if (io.set_term(&io, kSeedTerm) != 0) {
          result = absl::UnavailableError(
              absl::StrCat("raft term in ", dir, ": ", io.errmsg));
          return;
        }
        result =
            PutSnapshot(io, loop, dir, id, raft_address, index, snapshot_data);
      });
  return io_status.ok() ? result : io_status;
}

}  // namespace dedup
