// The C++ helpers' load for the rolling restart test (rolling_restart_test.py):
// RunOnce threads, half of them through a CoalescingClient, each with the
// group's addresses in its own order (so first attempts go to every node),
// on fresh keys and on a small pool of keys every thread repeats, until
// --stop_file exists.
//
// Writes one line per call that returned an outcome to --out:
// "KEY<TAB>ARGS_HASH_HEX<TAB>RESULT" (RESULT the stored JSON text), prints
// "calls: N failures: F" and exits 1 if any call failed (each failure on
// stderr).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/args_hash.h"
#include "client/coalescing_client.h"
#include "client/dedup_client.h"
#include "client/run_once.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, addresses, "", "the group's client addresses, a,b,c");
ABSL_FLAG(std::string, out, "", "file for the outcomes");
ABSL_FLAG(std::string, stop_file, "", "stop once this file exists");
ABSL_FLAG(int, threads, 8, "callers");

namespace dedup {
namespace {

constexpr char kNamespace[] = "roll-cpp";
constexpr int kRepeatedKeys = 32;

struct Outcomes {
  std::mutex mu;
  std::vector<std::string> lines;
  std::atomic<int> calls{0};
  std::atomic<int> failures{0};
};

std::vector<std::string> Rotated(std::vector<std::string> v, int by) {
  std::rotate(v.begin(), v.begin() + by % v.size(), v.end());
  return v;
}

// One caller: every fourth call on a repeated key, the others on fresh ones.
void Caller(int id, const Client& client, CoalescingClient* coalescing,
            const std::string& stop_file, Outcomes* outcomes) {
  RunOptions options;
  options.coalescing = coalescing;
  for (int i = 0; access(stop_file.c_str(), F_OK) != 0; ++i) {
    const std::string key = i % 4 == 3 ? absl::StrCat("rep-", i % kRepeatedKeys)
                                       : absl::StrCat("t", id, "-", i);
    const std::string args = nlohmann::json{{"key", key}}.dump();
    const absl::StatusOr<std::string> hash = ArgsHash(args);
    if (!hash.ok()) {
      std::cerr << "args hash: " << hash.status() << "\n";
      ++outcomes->failures;
      return;
    }
    absl::StatusOr<RunResult> run = RunOnce(
        client, kNamespace, key, *hash,
        [&](const Claim&) {
          return ExecResult::SuccessJson({{"key", key}, {"by", id}});
        },
        options);
    ++outcomes->calls;
    if (!run.ok()) {
      ++outcomes->failures;
      std::cerr << "RunOnce " << key << ": " << run.status() << "\n";
      continue;
    }
    std::lock_guard<std::mutex> lock(outcomes->mu);
    outcomes->lines.push_back(absl::StrCat(
        key, "\t", absl::BytesToHexString(*hash), "\t", run->result));
  }
}

int Main() {
  const std::vector<std::string> addresses =
      absl::StrSplit(absl::GetFlag(FLAGS_addresses), ',', absl::SkipEmpty());
  if (addresses.empty() || absl::GetFlag(FLAGS_out).empty() ||
      absl::GetFlag(FLAGS_stop_file).empty()) {
    std::cerr
        << "usage: rolling_load --addresses=a,b,c --out=F --stop_file=F\n";
    return 64;
  }
  const int threads = absl::GetFlag(FLAGS_threads);
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<CoalescingClient>> coalescing;
  for (int t = 0; t < threads; ++t) {
    clients.push_back(std::make_unique<Client>(Rotated(addresses, t)));
    coalescing.push_back(
        t % 2 == 0 ? nullptr
                   : std::make_unique<CoalescingClient>(Rotated(addresses, t)));
  }
  Outcomes outcomes;
  std::vector<std::thread> callers;
  for (int t = 0; t < threads; ++t) {
    callers.emplace_back(Caller, t, std::cref(*clients[t]), coalescing[t].get(),
                         absl::GetFlag(FLAGS_stop_file), &outcomes);
  }
  for (std::thread& t : callers) t.join();
  std::ofstream out(absl::GetFlag(FLAGS_out));
  for (const std::string& line : outcomes.lines) out << line << "\n";
  out.close();
  const bool written = !out.fail();
  std::cout << "calls: " << outcomes.calls.load()
            << " failures: " << outcomes.failures.load() << std::endl;
  return outcomes.failures.load() == 0 && written ? 0 : 1;
}

}  // namespace
}  // namespace dedup

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return dedup::Main();
}
