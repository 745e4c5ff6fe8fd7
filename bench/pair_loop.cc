// A small closed-loop load: N threads each run Begin+Complete on fresh keys
// for a fixed time against a running dedupd and print pairs/s. A rough gauge
// until the benchmark harness lands; not a benchmark of record.
//
//   pair_loop --address=127.0.0.1:50051 --threads=64 --seconds=10
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, address, "127.0.0.1:50051", "dedupd address");
ABSL_FLAG(int, threads, 64, "concurrent callers");
ABSL_FLAG(int, channels, 4, "gRPC channels shared round-robin by callers");
ABSL_FLAG(int, seconds, 10, "duration");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int threads = absl::GetFlag(FLAGS_threads);
  std::vector<std::unique_ptr<dedup::v1::Dedup::Stub>> stubs;
  for (int i = 0; i < absl::GetFlag(FLAGS_channels); ++i) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", i);  // distinct channels, not one shared
    stubs.push_back(dedup::v1::Dedup::NewStub(
        grpc::CreateCustomChannel(absl::GetFlag(FLAGS_address),
                                  grpc::InsecureChannelCredentials(), args)));
  }
  const std::string run =
      absl::StrCat(std::chrono::system_clock::now().time_since_epoch().count());
  std::atomic<bool> stop{false};
  std::atomic<long> pairs{0}, errors{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto& stub = *stubs[t % stubs.size()];
      for (long i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        const std::string key = absl::StrCat(run, "-", t, "-", i);
        dedup::v1::BeginRequest begin;
        begin.set_namespace_("load");
        begin.set_key(key);
        begin.set_args_hash("0123456789abcdef0123456789abcdef");
        dedup::v1::BeginResponse begun;
        grpc::ClientContext c1;
        if (!stub.Begin(&c1, begin, &begun).ok() ||
            begun.status() != dedup::v1::BeginResponse::STARTED) {
          ++errors;
          continue;
        }
        dedup::v1::CompleteRequest complete;
        complete.set_namespace_("load");
        complete.set_key(key);
        complete.set_fence(begun.fence());
        complete.set_outcome(dedup::v1::SUCCESS);
        complete.set_result("ok");
        dedup::v1::CompleteResponse completed;
        grpc::ClientContext c2;
        if (!stub.Complete(&c2, complete, &completed).ok() ||
            completed.status() != dedup::v1::CompleteResponse::OK) {
          ++errors;
          continue;
        }
        ++pairs;
      }
    });
  }
  const int seconds = absl::GetFlag(FLAGS_seconds);
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  stop = true;
  for (auto& w : workers) w.join();
  std::printf("threads=%d pairs=%ld errors=%ld pairs_per_s=%.0f\n", threads,
              pairs.load(), errors.load(),
              static_cast<double>(pairs.load()) / seconds);
  return errors.load() == 0 ? 0 : 1;
}
