// A tenant flooding the server past its limits is refused cheaply, with a
// RetryInfo, and cannot take what other tenants need: their calls are all
// answered, with latency close to what they had before the flood, and the
// server's memory stays bounded (issue 15, acceptance 2).
//
// The flood is the harsh case: raw stubs that ignore RetryInfo and call
// again at once, from several threads, in a closed loop. On this 2-core test
// machine the flooding threads and the server share the CPU, so some latency
// comes from that alone: the bound below is loose (an order of magnitude),
// and catches a flood that queues the other tenant behind its own work (in
// storage, or waiting for in-flight slots), which takes seconds. The figures
// are printed; under a sanitizer only correctness is asserted (no latency
// or memory bounds).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/http_get.h"
#include "tests/testing/server_process.h"
#include "tests/testing/test_pki.h"

namespace dedup::testing {
namespace overload_test {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kFloodRps = 200;
constexpr int kFloodThreads = 4;
constexpr int kMeasuredPairs = 1000;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}

// Each caller its own connection, as separate clients would have.
std::unique_ptr<v1::Dedup::Stub> Stub(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  return v1::Dedup::NewStub(grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args));
}

void Prepare(grpc::ClientContext* ctx, const std::string& token) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(10));
  ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
}

v1::BeginRequest BeginReq(const std::string& ns, const std::string& key) {
  v1::BeginRequest req;
  req.set_namespace_(ns);
  req.set_key(key);
  req.set_args_hash("args");
  req.set_owner("overload-test");
  return req;
}

struct Latencies {
  std::vector<double> begin_ms;  // sorted
  int errors = 0;
  std::string first_error;

  double Percentile(double p) const {
    if (begin_ms.empty()) return -1;
    const size_t i = std::min(begin_ms.size() - 1,
                              static_cast<size_t>(p * begin_ms.size() / 100));
    return begin_ms[i];
  }
};

// The well-behaved tenant: Begin + Complete pairs one after another, the
// Begin timed. Every call must succeed.
Latencies MeasureBilling(const std::string& address, const std::string& tag) {
  std::unique_ptr<v1::Dedup::Stub> stub = Stub(address);
  Latencies out;
  auto fail = [&out](const grpc::Status& s) {
    if (out.errors++ == 0) {
      out.first_error = absl::StrCat(s.error_code(), ": ", s.error_message());
    }
  };
  for (int i = 0; i < kMeasuredPairs; ++i) {
    const std::string key = absl::StrCat(tag, "-", i);
    v1::BeginResponse began;
    grpc::ClientContext begin_ctx;
    Prepare(&begin_ctx, kBillingToken);
    const Clock::time_point start = Clock::now();
    grpc::Status s =
        stub->Begin(&begin_ctx, BeginReq("billing:overload", key), &began);
    out.begin_ms.push_back(MsSince(start));
    if (!s.ok()) {
      fail(s);
      continue;
    }
    v1::CompleteRequest done;
    done.set_namespace_("billing:overload");
    done.set_key(key);
    done.set_fence(began.fence());
    done.set_outcome(v1::SUCCESS);
    done.set_result("ok");
    v1::CompleteResponse completed;
    grpc::ClientContext complete_ctx;
    Prepare(&complete_ctx, kBillingToken);
    s = stub->Complete(&complete_ctx, done, &completed);
    if (!s.ok()) fail(s);
  }
  std::sort(out.begin_ms.begin(), out.begin_ms.end());
  return out;
}

struct FloodCounts {
  std::atomic<int64_t> accepted{0};
  std::atomic<int64_t> refused{0};
  std::atomic<int64_t> refused_without_retry_info{0};
  std::atomic<int64_t> other_errors{0};
};

// Calls Begin as fast as it can, ignoring RetryInfo, until `stop`.
void Flood(const std::string& address, int thread,
           const std::atomic<bool>& stop, FloodCounts& counts) {
  std::unique_ptr<v1::Dedup::Stub> stub = Stub(address);
  for (int i = 0; !stop.load(); ++i) {
    v1::BeginResponse began;
    grpc::ClientContext ctx;
    Prepare(&ctx, "flood-token");
    const grpc::Status s = stub->Begin(
        &ctx, BeginReq("flood:x", absl::StrCat(thread, "-", i)), &began);
    if (s.ok()) {
      ++counts.accepted;
    } else if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++counts.refused;
      const int64_t delay = RetryDelayMs(s);
      if (delay <= 0 || delay > 1000) ++counts.refused_without_retry_info;
    } else {
      ++counts.other_errors;
    }
  }
}

TEST(OverloadTest, FloodingTenantIsRefusedAndOthersKeepTheirLatency) {
  absl::StatusOr<std::string> dir = MakeTempDir("dedup-overload");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string tenants_file = *dir + "/tenants.json";
  WriteFileAtomically(
      tenants_file,
      WithLimitedTenant(
          StandardTenantsJson(), "flood", "flood-token",
          absl::StrCat(R"({"rps": )", kFloodRps, R"(, "inflight": 16})")));
  DEDUP_START_SERVER(server, {"--tenants_file=" + tenants_file,
                              "--metrics_address=127.0.0.1:0"});
  const std::string address = server->address();

  (void)MeasureBilling(address, "warmup");
  const Latencies before = MeasureBilling(address, "before");
  ASSERT_EQ(before.errors, 0) << before.first_error;
  const int64_t rss_before = PeakRssMib(server->pid());

  std::atomic<bool> stop{false};
  FloodCounts counts;
  std::vector<std::thread> flooders;
  const Clock::time_point flood_start = Clock::now();
  for (int t = 0; t < kFloodThreads; ++t) {
    flooders.emplace_back([&, t] { Flood(address, t, stop, counts); });
  }
  SleepMs(300);  // the flood under way
  const Latencies during = MeasureBilling(address, "during");
  stop.store(true);
  for (std::thread& t : flooders) t.join();
  const double flood_s = MsSince(flood_start) / 1000;
  const int64_t rss_after = PeakRssMib(server->pid());

  std::cerr << "billing Begin p50/p99 ms: before " << before.Percentile(50)
            << "/" << before.Percentile(99) << ", during the flood "
            << during.Percentile(50) << "/" << during.Percentile(99)
            << " (p99 ratio " << during.Percentile(99) / before.Percentile(99)
            << ")\nflood: " << counts.accepted << " accepted, "
            << counts.refused << " refused in " << flood_s << " s ("
            << (counts.accepted + counts.refused) / flood_s
            << " calls/s)\nserver peak RSS MiB: " << rss_before << " -> "
            << rss_after << "\n";

  // The other tenant: every call answered.
  EXPECT_EQ(during.errors, 0) << during.first_error;
  // The flooding tenant: refused past its rate, each refusal with a
  // RetryInfo; what got through stays within the limit (plus the burst).
  // Past the limit: refusals. Under a sanitizer 4 flooding threads offer
  // little more than the limit itself, so "more refused than accepted"
  // only says something uninstrumented.
  EXPECT_GT(counts.refused, 0) << "the flood was not a flood";
  if (!UnderSanitizer()) {
    EXPECT_GT(counts.refused, counts.accepted) << "the flood was not a flood";
  }
  EXPECT_EQ(counts.refused_without_retry_info, 0);
  EXPECT_EQ(counts.other_errors, 0);
  EXPECT_LE(counts.accepted, kFloodRps * (flood_s + 1) + kFloodRps / 10);
  // Memory bounded: refusals hold nothing. (Not under ASan, whose
  // quarantine keeps freed memory resident.)
  if (!UnderSanitizer()) {
    EXPECT_LT(rss_after - rss_before, 100) << "MiB";
  }
  // Refusals are counted, by reason.
  absl::StatusOr<double> limited =
      ScrapeSample(server->metrics_port(),
                   R"(dedup_tenant_limited_total{limit="rps",tenant="flood"})");
  ASSERT_TRUE(limited.ok()) << limited.status();
  EXPECT_EQ(*limited, counts.refused.load());
  if (!UnderSanitizer()) {
    EXPECT_LT(during.Percentile(99), 10 * before.Percentile(99) + 20)
        << "the other tenant waited behind the flood";
  }
  std::filesystem::remove_all(*dir);
}

}  // namespace
}  // namespace overload_test
}  // namespace dedup::testing
