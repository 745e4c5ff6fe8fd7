#include "bench/load/workloads.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dedup::bench {
namespace {

// 32 bytes, like the SHA-256 args_hash real clients send; printable so the
// text-based peers store it as is.
const std::string kArgsHash = "0123456789abcdef0123456789abcdef";

std::string Unexpected(const char* call, const char* got) {
  return absl::StrCat(call, " answered ", got);
}

// Begin then Complete on `key`, expecting STARTED then OK.
void BeginComplete(Backend& b, int conn, const std::string& key,
                   const std::string& owner, const std::string& result,
                   SlotCounters& c, OpDone done) {
  BeginCall begin{key, kArgsHash, owner};
  b.Begin(conn, begin, [&b, conn, key, result, &c, done](BeginAnswer a) {
    if (!a.error.empty()) return c.Error(a.error), done(0);
    ++c.begin[static_cast<int>(a.status)];
    if (a.status != BeginStatus::kStarted) {
      return c.Error(Unexpected("Begin", Name(a.status))), done(0);
    }
    CompleteCall complete{key, a.fence, result};
    b.Complete(conn, complete, [&c, done](FencedAnswer f) {
      if (!f.error.empty()) return c.Error(f.error), done(0);
      ++c.fenced[static_cast<int>(f.status)];
      if (f.status != FencedStatus::kOk) {
        return c.Error(Unexpected("Complete", Name(f.status))), done(0);
      }
      done(1);
    });
  });
}

class Base : public Workload {
 public:
  explicit Base(WorkloadOptions o)
      : o_(std::move(o)), result_(o_.result_bytes, 'r') {}

 protected:
  std::string Key(int slot, uint64_t seq, int i = 0) const {
    return absl::StrCat(o_.name, "-", o_.run_id, "-", slot, "-", seq, "-", i);
  }
  std::string Owner(int slot) const {
    return absl::StrCat("owner-", o_.run_id, "-", slot);
  }
  const WorkloadOptions o_;
  const std::string result_;
};

// Begin + Complete per fresh key: the life of one tool call.
class Unique : public Base {
 public:
  using Base::Base;
  void Run(Backend& b, int slot, int conn, uint64_t seq, SlotCounters& c,
           OpDone done) override {
    BeginComplete(b, conn, Key(slot, seq), Owner(slot), result_, c,
                  std::move(done));
  }
  const char* unit() const override { return "pairs"; }
};

// Begin alone on fresh keys: the unary call compared with bare Echo.
class BeginOnly : public Base {
 public:
  using Base::Base;
  void Run(Backend& b, int slot, int conn, uint64_t seq, SlotCounters& c,
           OpDone done) override {
    b.Begin(conn, BeginCall{Key(slot, seq), kArgsHash, Owner(slot)},
            [&c, done](BeginAnswer a) {
              if (!a.error.empty()) return c.Error(a.error), done(0);
              ++c.begin[static_cast<int>(a.status)];
              if (a.status != BeginStatus::kStarted) {
                return c.Error(Unexpected("Begin", Name(a.status))), done(0);
              }
              done(1);
            });
  }
  const char* unit() const override { return "calls"; }
};

// A share of Begins replays completed keys (retries of finished calls); the
// rest are fresh Begin + Complete pairs. A unit is one Begin.
class Duplicates : public Base {
 public:
  using Base::Base;

  std::string Prepare(Backend& b, int slots) override {
    std::atomic<int> next{0};
    std::atomic<int> running{slots};
    std::mutex mu;
    std::condition_variable cv;
    std::string error;
    std::vector<SlotCounters> counters(slots);
    // Each slot completes keys from a shared index until all exist.
    std::function<void(int)> step = [&](int slot) {
      const int i = next++;
      if (i >= o_.prepopulate) {
        if (--running == 0) {
          std::lock_guard<std::mutex> lock(mu);
          cv.notify_all();
        }
        return;
      }
      const int conn = slot % b.connections();
      b.RunAt(conn, Clock::now(), [&, slot, conn, i] {
        BeginComplete(b, conn, DupKey(i), Owner(slot), result_, counters[slot],
                      [&, slot](int units) { step(slot); });
      });
    };
    for (int s = 0; s < slots; ++s) step(s);
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return running.load() == 0; });
    for (const SlotCounters& c : counters) {
      if (c.errors > 0) return "prepopulate: " + c.first_error;
    }
    return "";
  }

  void Run(Backend& b, int slot, int conn, uint64_t seq, SlotCounters& c,
           OpDone done) override {
    thread_local std::mt19937_64 rng(std::random_device{}());
    if (std::uniform_real_distribution<double>(0, 1)(rng) >= o_.dup_fraction) {
      return BeginComplete(b, conn, Key(slot, seq), Owner(slot), result_, c,
                           std::move(done));
    }
    const int i = static_cast<int>(rng() % o_.prepopulate);
    b.Begin(conn, BeginCall{DupKey(i), kArgsHash, Owner(slot)},
            [&c, done](BeginAnswer a) {
              if (!a.error.empty()) return c.Error(a.error), done(0);
              ++c.begin[static_cast<int>(a.status)];
              if (a.status != BeginStatus::kDuplicate) {
                return c.Error(Unexpected("Begin", Name(a.status))), done(0);
              }
              done(1);
            });
  }
  const char* unit() const override { return "begins"; }

 private:
  std::string DupKey(int i) const {
    return absl::StrCat("dup-", o_.run_id, "-", i);
  }
};

// Every slot fights over a few keys, each slot its own owner: one wins
// (STARTED, then Releases at once so the key is contested again), the others
// get IN_USE, or wait up to wait_ms for the winner. A unit is one Begin.
class Hot : public Base {
 public:
  using Base::Base;
  void Run(Backend& b, int slot, int conn, uint64_t seq, SlotCounters& c,
           OpDone done) override {
    const std::string key =
        absl::StrCat("hot-", o_.run_id, "-", (slot + seq) % o_.hot_keys);
    BeginCall call{key, kArgsHash, Owner(slot)};
    call.wait_ms = o_.wait_ms;
    b.Begin(conn, call, [&b, conn, key, &c, done](BeginAnswer a) {
      if (!a.error.empty()) return c.Error(a.error), done(0);
      ++c.begin[static_cast<int>(a.status)];
      if (a.status == BeginStatus::kInUse) return done(1);
      if (a.status != BeginStatus::kStarted) {
        return c.Error(Unexpected("Begin", Name(a.status))), done(0);
      }
      b.Release(conn, key, a.fence, [&c, done](FencedAnswer f) {
        if (!f.error.empty()) return c.Error(f.error), done(0);
        ++c.fenced[static_cast<int>(f.status)];
        if (f.status != FencedStatus::kOk) {
          return c.Error(Unexpected("Release", Name(f.status))), done(0);
        }
        done(1);
      });
    });
  }
  const char* unit() const override { return "begins"; }
};

// BeginBatch of `batch` fresh keys; with `complete`, then CompleteBatch of
// them. A unit is one key.
class Batch : public Base {
 public:
  Batch(WorkloadOptions o, bool complete)
      : Base(std::move(o)), complete_(complete) {}
  void Run(Backend& b, int slot, int conn, uint64_t seq, SlotCounters& c,
           OpDone done) override {
    std::vector<BeginCall> calls;
    for (int i = 0; i < o_.batch; ++i) {
      calls.push_back(BeginCall{Key(slot, seq, i), kArgsHash, Owner(slot)});
    }
    const int n = o_.batch;
    b.BeginBatch(
        conn, calls,
        [this, &b, conn, calls, n, &c, done](std::vector<BeginAnswer> answers) {
          if (static_cast<int>(answers.size()) != n) {
            return c.Error(answers.empty() ? "empty BeginBatch answer"
                                           : answers[0].error),
                   done(0);
          }
          std::vector<CompleteCall> completes;
          for (int i = 0; i < n; ++i) {
            const BeginAnswer& a = answers[i];
            if (!a.error.empty()) return c.Error(a.error), done(0);
            ++c.begin[static_cast<int>(a.status)];
            if (a.status != BeginStatus::kStarted) {
              return c.Error(Unexpected("BeginBatch item", Name(a.status))),
                     done(0);
            }
            completes.push_back(CompleteCall{calls[i].key, a.fence, result_});
          }
          if (!complete_) return done(n);
          b.CompleteBatch(
              conn, completes, [n, &c, done](std::vector<FencedAnswer> fs) {
                if (static_cast<int>(fs.size()) != n) {
                  return c.Error(fs.empty() ? "empty CompleteBatch answer"
                                            : fs[0].error),
                         done(0);
                }
                for (const FencedAnswer& f : fs) {
                  if (!f.error.empty()) return c.Error(f.error), done(0);
                  ++c.fenced[static_cast<int>(f.status)];
                  if (f.status != FencedStatus::kOk) {
                    return c.Error(Unexpected("CompleteBatch item",
                                              Name(f.status))),
                           done(0);
                  }
                }
                done(n);
              });
        });
  }
  const char* unit() const override { return "keys"; }

 private:
  const bool complete_;
};

// The system's do-nothing round trip with a Begin-sized payload.
class Echo : public Base {
 public:
  explicit Echo(WorkloadOptions o)
      : Base(std::move(o)), payload_(o_.echo_bytes, 'p') {}
  void Run(Backend& b, int slot, int conn, uint64_t seq, SlotCounters& c,
           OpDone done) override {
    b.Echo(conn, payload_, [&c, done](std::string error) {
      if (!error.empty()) return c.Error(error), done(0);
      done(1);
    });
  }
  const char* unit() const override { return "calls"; }

 private:
  const std::string payload_;
};

// Plain claims without the protocol: `setnx_pipeline` SET NX EX per round
// trip (Redis only), the reference for BeginBatch keys/s.
class SetNx : public Base {
 public:
  using Base::Base;
  void Run(Backend& b, int slot, int conn, uint64_t seq, SlotCounters& c,
           OpDone done) override {
    std::vector<std::string> keys;
    for (int i = 0; i < o_.setnx_pipeline; ++i)
      keys.push_back(Key(slot, seq, i));
    const int n = o_.setnx_pipeline;
    b.SetNx(conn, keys, 3600, [n, &c, done](std::string error) {
      if (!error.empty()) return c.Error(error), done(0);
      done(n);
    });
  }
  const char* unit() const override { return "keys"; }
};

}  // namespace

const char* Name(BeginStatus s) {
  static const char* kNames[] = {"STARTED", "IN_USE", "CONFLICT", "DUPLICATE"};
  return kNames[static_cast<int>(s)];
}

const char* Name(FencedStatus s) {
  static const char* kNames[] = {"OK", "STALE_FENCE", "NOT_FOUND",
                                 "ALREADY_COMPLETED"};
  return kNames[static_cast<int>(s)];
}

std::unique_ptr<Workload> Workload::Create(const WorkloadOptions& o) {
  if (o.name == "unique") return std::make_unique<Unique>(o);
  if (o.name == "begin") return std::make_unique<BeginOnly>(o);
  if (o.name == "duplicates") return std::make_unique<Duplicates>(o);
  if (o.name == "hot") return std::make_unique<Hot>(o);
  if (o.name == "batch") return std::make_unique<Batch>(o, true);
  if (o.name == "beginbatch") return std::make_unique<Batch>(o, false);
  if (o.name == "echo") return std::make_unique<Echo>(o);
  if (o.name == "setnx") return std::make_unique<SetNx>(o);
  return nullptr;
}

}  // namespace dedup::bench
