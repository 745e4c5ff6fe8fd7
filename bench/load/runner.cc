#include "bench/load/runner.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

namespace dedup::bench {
namespace {

double CpuSeconds(const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

// User + system CPU seconds of process `pid` (/proc/<pid>/stat); -1 if gone.
double ProcessCpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  const size_t comm_end = stat.rfind(')');
  if (comm_end == std::string::npos) return -1;
  // After "pid (comm)": state is field 3, utime 14, stime 15.
  std::istringstream fields(stat.substr(comm_end + 1));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::stod(field);
  }
  return ticks / sysconf(_SC_CLK_TCK);
}

// The sum over `pids` (the nodes of a group); -1 if empty or one is gone.
double ProcessesCpuSeconds(const std::vector<int>& pids) {
  if (pids.empty()) return -1;
  double sum = 0;
  for (int pid : pids) {
    const double s = ProcessCpuSeconds(pid);
    if (s < 0) return -1;
    sum += s;
  }
  return sum;
}

// Total and steal jiffies of the whole machine (/proc/stat's "cpu" line).
struct MachineTicks {
  double total = 0, steal = 0;
};
MachineTicks ReadMachineTicks() {
  std::ifstream in("/proc/stat");
  std::string label;
  in >> label;  // "cpu"
  MachineTicks t;
  double value = 0;
  // user nice system idle iowait irq softirq steal (guest time is counted
  // inside user already)
  for (int i = 0; i < 8 && in >> value; ++i) {
    t.total += value;
    if (i == 7) t.steal = value;
  }
  return t;
}
struct Slot {
  int index = 0;
  int conn = 0;
  uint64_t seq = 0;
  Clock::time_point due;
  Histogram latency;
  uint64_t ops = 0;
  uint64_t units = 0;
  SlotCounters counters;
};

// Shared by the slots of one run; outlives every callback (Run waits until
// all slots stopped, or leaks it if some never answer).
struct State {
  Backend* backend;
  Workload* workload;
  Clock::time_point measure_from, end;
  Clock::duration interval{};  // per slot, open loop only
  bool open_loop = false;
  std::vector<Slot> slots;
  std::atomic<int> active{0};
  std::mutex mu;
  std::condition_variable cv;

  void Launch(Slot& s) {
    const Clock::time_point due = s.due;
    if (due >= end) return Stopped();
    backend->RunAt(s.conn, due, [this, &s, due] {
      workload->Run(*backend, s.index, s.conn, s.seq++, s.counters,
                    [this, &s, due](int units) { Finished(s, due, units); });
    });
  }

  void Finished(Slot& s, Clock::time_point started, int units) {
    const Clock::time_point now = Clock::now();
    if (now >= measure_from && now < end && units > 0) {
      s.latency.Record(
          std::chrono::duration_cast<std::chrono::microseconds>(now - started)
              .count());
      ++s.ops;
      s.units += units;
    }
    // Closed loop: next right away. Open loop: on schedule, late or not.
    s.due = open_loop ? s.due + interval : now;
    Launch(s);
  }

  void Stopped() {
    if (--active == 0) {
      std::lock_guard<std::mutex> lock(mu);
      cv.notify_all();
    }
  }
};

}  // namespace

RunResult Run(Backend& backend, Workload& workload, const RunOptions& o) {
  auto state = std::make_unique<State>();
  State& st = *state;
  st.backend = &backend;
  st.workload = &workload;
  st.slots.resize(o.outstanding);
  const Clock::time_point start = Clock::now();
  st.measure_from = start + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(o.warmup_s));
  st.end = st.measure_from + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(o.duration_s));
  if (o.rate > 0) {
    st.open_loop = true;
    st.interval = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(o.outstanding / o.rate));
  }
  st.active = o.outstanding;
  for (int i = 0; i < o.outstanding; ++i) {
    Slot& s = st.slots[i];
    s.index = i;
    s.conn = i % backend.connections();
    // Open loop: slots staggered evenly so the aggregate arrivals are
    // uniform at `rate`.
    s.due = start + (st.open_loop ? st.interval * i / o.outstanding
                                  : Clock::duration::zero());
  }
  rusage before{}, after{};
  bool have_before = false;
  for (Slot& s : st.slots) st.Launch(s);
  // CPU use of the load generator, the server and the machine, sampled
  // around the window.
  std::this_thread::sleep_until(st.measure_from);
  have_before = getrusage(RUSAGE_SELF, &before) == 0;
  const double server_before = ProcessesCpuSeconds(o.server_pids);
  const MachineTicks machine_before = ReadMachineTicks();
  std::this_thread::sleep_until(st.end);
  getrusage(RUSAGE_SELF, &after);
  const double server_after = ProcessesCpuSeconds(o.server_pids);
  const MachineTicks machine_after = ReadMachineTicks();

  RunResult r;
  {
    std::unique_lock<std::mutex> lock(st.mu);
    st.cv.wait_until(lock, Clock::now() + std::chrono::seconds(30),
                     [&] { return st.active.load() == 0; });
  }
  r.unfinished = st.active.load();
  r.seconds = o.duration_s;
  for (const Slot& s : st.slots) {
    r.ops += s.ops;
    r.units += s.units;
    r.latency.Merge(s.latency);
    for (int i = 0; i < 4; ++i) {
      r.counters.begin[i] += s.counters.begin[i];
      r.counters.fenced[i] += s.counters.fenced[i];
    }
    if (s.counters.errors > 0 && r.counters.errors == 0) {
      r.counters.first_error = s.counters.first_error;
    }
    r.counters.errors += s.counters.errors;
  }
  if (have_before) {
    r.cpu_user_s = CpuSeconds(after.ru_utime) - CpuSeconds(before.ru_utime);
    r.cpu_sys_s = CpuSeconds(after.ru_stime) - CpuSeconds(before.ru_stime);
  }
  if (server_before >= 0 && server_after >= 0) {
    r.server_cpu_s = server_after - server_before;
  }
  if (machine_after.total > machine_before.total) {
    r.steal_fraction = (machine_after.steal - machine_before.steal) /
                       (machine_after.total - machine_before.total);
  }
  if (r.unfinished > 0) {
    r.counters.errors += r.unfinished;
    if (r.counters.first_error.empty()) {
      r.counters.first_error = "operations still unanswered 30 s after the end";
    }
    state.release();  // callbacks may still come: keep their state alive
  }
  return r;
}

}  // namespace dedup::bench
