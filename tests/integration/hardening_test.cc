// dedupd under abuse: a batch that names one large result many times, idle
// connections to the metrics port, silent and idle gRPC connections.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/http_get.h"
#include "tests/testing/server_process.h"

namespace dedup::testing {
namespace hardening_test {
namespace {

// A TCP connection to 127.0.0.1:port that sends nothing; -1 on failure.
int OpenSilentConnection(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

double Metric(const ServerProcess& server, const std::string& series) {
  return ScrapeSample(server.metrics_port(), series).value_or(-1);
}

TEST(HardeningTest, BatchAnswersCarryBoundedResults) {
  // Also run against a 3-node group (DEDUP_TEST_CLUSTER): pid() is then -1
  // and there is no metrics port, so those checks are single-node only.
  // The largest result allowed (1 MiB) under the default cap of 3 MiB of
  // results per answer. Under a sanitizer every copy a Begin makes of a
  // large result is a fresh mapping (its allocator maps big blocks anew),
  // 9 GB of page faults here: there the test runs at 1/16 of the scale,
  // the limits scaled alike, within its deadline.
  const int result_bytes = UnderSanitizer() ? 64 << 10 : 1 << 20;
  DEDUP_START_SERVER(
      server, {"--durability=none", "--metrics_address=127.0.0.1:0",
               absl::StrCat("--max_result_bytes=", result_bytes),
               absl::StrCat("--max_batch_response_bytes=", 3 * result_bytes)});
  const bool single_node = server->pid() > 0;
  TestClient c(server->address(), "hardening");
  const v1::BeginResponse begun = c.Begin("big", "w");
  const std::string result(result_bytes, 'r');
  ASSERT_EQ(c.Complete("big", begun.fence(), result).status(),
            v1::CompleteResponse::OK);
  const int64_t rss_before = single_node ? PeakRssMib(server->pid()) : 0;

  // Three batches at once, each naming the result a thousand times:
  // without a cap that is 3 GiB of answers (192 MiB under a sanitizer).
  v1::BeginBatchRequest request;
  for (int i = 0; i < 1000; ++i) *request.add_items() = c.BeginReq("big", "");
  std::vector<v1::BeginBatchResponse> responses(3);
  std::vector<grpc::Status> statuses(3);
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&, t] {
      auto stub = NewStub(server->address());
      grpc::ClientContext ctx;
      SetDeadline(&ctx, 30'000);
      statuses[t] = stub->BeginBatch(&ctx, request, &responses[t]);
    });
  }
  // Meanwhile an unrelated call is answered promptly.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(c.Begin("unrelated", "w").status(), v1::BeginResponse::STARTED);
  const auto unrelated = std::chrono::steady_clock::now() - start;
  for (auto& caller : callers) caller.join();

  int answered = 0, ask_again = 0;
  for (int t = 0; t < 3; ++t) {
    // The whole answer fits a client's default 4 MiB receive limit.
    ASSERT_TRUE(statuses[t].ok()) << statuses[t].error_message();
    ASSERT_EQ(responses[t].items_size(), 1000);
    EXPECT_LT(responses[t].ByteSizeLong(), 4u << 20);
    for (const auto& item : responses[t].items()) {
      if (item.has_response()) {
        EXPECT_EQ(item.response().status(), v1::BeginResponse::DUPLICATE);
        EXPECT_EQ(item.response().result().size(), result.size());
        ++answered;
      } else {
        EXPECT_EQ(item.error().code(), grpc::StatusCode::UNAVAILABLE);
        EXPECT_TRUE(absl::StrContains(item.error().message(),
                                      "ask for this item again"))
            << item.error().message();
        ++ask_again;
      }
    }
  }
  EXPECT_EQ(answered, 9);  // 3 results per answer (3 MiB by default)
  EXPECT_EQ(ask_again, 3000 - answered);
  EXPECT_LT(unrelated, std::chrono::seconds(2));
  if (single_node) {
    EXPECT_EQ(Metric(*server, "dedup_batch_results_capped_total"), ask_again);
    const int64_t rss_after = PeakRssMib(server->pid());
    EXPECT_LT(rss_after - rss_before, 400)
        << "peak RSS " << rss_before << " -> " << rss_after << " MiB";
  }
  c.Disconnect();
}

// Sends `payload` as the raw request of `method`; returns the status.
grpc::Status RawUnaryCall(grpc::GenericStub& stub, const std::string& method,
                          const std::string& payload) {
  grpc::Slice slice(payload);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, 5000);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status status) { done.set_value(status); });
  return done.get_future().get();
}

// A request that does not parse (invalid UTF-8 in a string field, or not
// protobuf at all) is INVALID_ARGUMENT saying so, counted, and logged at
// most once a minute instead of once each.
TEST(HardeningTest, UnparseableRequestsAreInvalidArgumentsAndCounted) {
  DEDUP_START_SERVER(server,
                     {"--durability=none", "--metrics_address=127.0.0.1:0"});
  grpc::GenericStub stub(grpc::CreateChannel(
      server->address(), grpc::InsecureChannelCredentials()));
  const std::string bad_utf8("\x0a\x02\xff\xfe", 4);  // namespace: FF FE
  const std::string not_protobuf("\xff\xff\xff", 3);
  for (int i = 0; i < 100; ++i) {
    for (const std::string* payload : {&bad_utf8, &not_protobuf}) {
      const grpc::Status s =
          RawUnaryCall(stub, "/dedup.v1.Dedup/Begin", *payload);
      ASSERT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
      ASSERT_TRUE(absl::StartsWith(s.error_message(),
                                   "request: cannot be "
                                   "parsed"))
          << s.error_message();
    }
  }
  EXPECT_EQ(
      RawUnaryCall(stub, "/dedup.v1.Admin/Stats", not_protobuf).error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);
  // A method this server does not have stays UNIMPLEMENTED: clients fall
  // back on that (e.g. CheckpointBatch sent to an older server).
  for (const char* unknown :
       {"/dedup.v1.Dedup/NoSuchMethod", "/dedup.v1.NoSuchService/Begin"}) {
    const grpc::Status s = RawUnaryCall(stub, unknown, "");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED)
        << unknown << ": " << s.error_message();
  }
  EXPECT_EQ(Metric(*server,
                   "dedup_invalid_requests_total{field=\"request\",method="
                   "\"Begin\"}"),
            200);
  // The server still answers, and wrote one protobuf line, not hundreds.
  TestClient c(server->address(), "hardening");
  EXPECT_EQ(c.Begin("after", "w").status(), v1::BeginResponse::STARTED);
  const std::string log = server->captured_stderr();
  size_t lines = 0;
  for (size_t at = log.find("protobuf"); at != std::string::npos;
       at = log.find("protobuf", at + 1)) {
    ++lines;
  }
  EXPECT_LE(lines, 2u) << log;
  c.Disconnect();
}

// A dedup.v1 service this node does not serve is UNIMPLEMENTED saying why
// (not "cannot be parsed"); once served, its unparseable requests are
// INVALID_ARGUMENT like the others'.
TEST(HardeningTest, ServicesNotServedAreUnimplementedSayingWhy) {
  DEDUP_START_SERVER(server, {"--durability=none"});
  grpc::GenericStub stub(grpc::CreateChannel(
      server->address(), grpc::InsecureChannelCredentials()));
  const grpc::Status cluster =
      RawUnaryCall(stub, "/dedup.v1.Cluster/Status", "");
  EXPECT_EQ(cluster.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_TRUE(absl::StartsWith(cluster.error_message(),
                               "this node is not in cluster mode"))
      << cluster.error_message();
  const grpc::Status bench = RawUnaryCall(stub, "/dedup.v1.Bench/Echo", "");
  EXPECT_EQ(bench.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(bench.error_message(),
            "Bench service is off; start dedupd with --enable_bench_service");

  DEDUP_START_SERVER(bench_on, {"--durability=none", "--enable_bench_service"});
  grpc::GenericStub bench_stub(grpc::CreateChannel(
      bench_on->address(), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(RawUnaryCall(bench_stub, "/dedup.v1.Bench/Echo", "\xff\xff\xff")
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

namespace health = ::grpc::health::v1;

// The health status of `service` at `address`; NOT_FOUND's code as
// SERVICE_UNKNOWN.
health::HealthCheckResponse::ServingStatus HealthOf(
    const std::string& address, const std::string& service) {
  auto stub = health::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  health::HealthCheckRequest request;
  request.set_service(service);
  health::HealthCheckResponse response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, 3000);
  const grpc::Status s = stub->Check(&ctx, request, &response);
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
    return health::HealthCheckResponse::SERVICE_UNKNOWN;
  }
  EXPECT_TRUE(s.ok()) << address << " " << service << ": " << s.error_message();
  return response.status();
}

// The client port answers for the services the README names, as the health
// port does, and both follow the node's state (here: draining).
TEST(HardeningTest, BothPortsAnswerHealthForTheNamedServices) {
  DEDUP_START_SERVER(server,
                     {"--durability=none", "--health_address=127.0.0.1:0",
                      "--lame_duck_ms=3000"});
  const std::vector<std::string> ports = {server->address(),
                                          server->ready().health_address};
  for (const std::string& port : ports) {
    for (const char* service : {"", "dedup.v1.Dedup", "dedup.v1.Admin"}) {
      EXPECT_EQ(HealthOf(port, service), health::HealthCheckResponse::SERVING)
          << port << " '" << service << "'";
    }
    // A single node serves no Cluster service.
    EXPECT_EQ(HealthOf(port, "dedup.v1.Cluster"),
              health::HealthCheckResponse::SERVICE_UNKNOWN)
        << port;
  }
  ASSERT_EQ(kill(server->pid(), SIGTERM), 0);
  for (const std::string& port : ports) {
    for (const char* service : {"", "dedup.v1.Dedup", "dedup.v1.Admin"}) {
      health::HealthCheckResponse::ServingStatus status =
          health::HealthCheckResponse::SERVING;
      for (int i = 0; i < 40 && status == health::HealthCheckResponse::SERVING;
           ++i) {
        status = HealthOf(port, service);
        if (status == health::HealthCheckResponse::SERVING) SleepMs(25);
      }
      EXPECT_EQ(status, health::HealthCheckResponse::NOT_SERVING)
          << port << " '" << service << "'";
    }
  }
}

TEST(HardeningTest, IdleConnectionsDoNotBlockScrapes) {
  DEDUP_START_SERVER(server,
                     {"--durability=none", "--metrics_address=127.0.0.1:0"});
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(OpenSilentConnection(server->metrics_port()));
    ASSERT_GE(idle.back(), 0);
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> page =
      HttpGet(server->metrics_port(), "/metrics");
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_LT(took, std::chrono::seconds(2));
  for (int fd : idle) close(fd);
}

TEST(HardeningTest, SilentAndIdleConnectionsAreClosed) {
  DEDUP_START_SERVER(server, {"--durability=none", "--handshake_timeout_ms=500",
                              "--max_connection_idle_ms=500"});
  const int baseline = OpenDescriptors(server->pid());
  std::vector<int> silent;
  for (int i = 0; i < 50; ++i) {
    silent.push_back(OpenSilentConnection(server->port()));
    ASSERT_GE(silent.back(), 0);
  }
  // The server accepted them all, then closes each at the handshake timeout.
  bool grew = false, shrank = false;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end && !shrank) {
    const int now = OpenDescriptors(server->pid());
    grew = grew || now >= baseline + 40;
    shrank = grew && now <= baseline + 5;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(grew) << "the connections were never accepted";
  EXPECT_TRUE(shrank) << "silent connections were still open after 10 s";
  for (int fd : silent) {
    // The server may have sent its HTTP/2 preface first; then EOF.
    char buffer[256];
    ssize_t n;
    while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
    }
    EXPECT_EQ(n, 0) << "expected EOF from the server";
    close(fd);
  }

  // A gRPC connection whose calls are done is closed once idle; the next
  // call reconnects.
  auto channel = grpc::CreateChannel(server->address(),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Dedup::NewStub(channel);
  v1::GetRequest get;
  get.set_namespace_("hardening");
  get.set_key("k");
  v1::GetResponse got;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, 5000);
  ASSERT_TRUE(stub->Get(&ctx, get, &got).ok());
  EXPECT_EQ(channel->GetState(false), GRPC_CHANNEL_READY);
  const auto idle_end =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (channel->GetState(false) == GRPC_CHANNEL_READY &&
         std::chrono::steady_clock::now() < idle_end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(channel->GetState(false), GRPC_CHANNEL_READY);
  grpc::ClientContext again;
  SetDeadline(&again, 5000);
  EXPECT_TRUE(stub->Get(&again, get, &got).ok());
}

}  // namespace
}  // namespace hardening_test
}  // namespace dedup::testing
