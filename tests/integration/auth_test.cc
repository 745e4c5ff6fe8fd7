// Tenants end to end against the real dedupd: tokens bound to namespaces,
// roles, reloads of the tenants file, limits, and settings that must stop
// the start. TLS and client certificates are in tls_test.cc.

#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/auth_fixture.h"

namespace dedup::testing {
namespace {

TEST_F(AuthTest, TokensBindTenantsToTheirNamespaces) {
  DEDUP_START_SERVER(server, {"--tenants_file=" + tenants_file_,
                              "--metrics_address=127.0.0.1:0"});
  const std::string a = server->address();

  grpc::Status s = Begin(a, kNobody, "billing:inv", "k");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "no credential"))
      << s.error_message();
  s = Begin(a, Token("not-a-token"), "billing:inv", "k");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "not known"))
      << s.error_message();
  s = Begin(a, Header("Basic Zm9vOmJhcg=="), "billing:inv", "k");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // Its own namespace: the whole life of a key.
  v1::BeginResponse begun;
  ASSERT_TRUE(Begin(a, kBilling, "billing:inv", "k", &begun).ok());
  ASSERT_EQ(begun.status(), v1::BeginResponse::STARTED);
  ASSERT_TRUE(
      Complete(a, kBilling, "billing:inv", "k", begun.fence(), "sent").ok());
  v1::GetResponse got;
  ASSERT_TRUE(Get(a, kBilling, "billing:inv", "k", &got).ok());
  EXPECT_EQ(got.record().result(), "sent");

  // Another tenant's namespace: refused the same way whether or not the
  // key exists there.
  ASSERT_TRUE(Begin(a, kOps, "ops:jobs", "exists").ok());
  grpc::Status existing = Get(a, kBilling, "ops:jobs", "exists", &got);
  grpc::Status missing = Get(a, kBilling, "ops:jobs", "missing", &got);
  EXPECT_EQ(existing.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(existing.error_message(), missing.error_message());
  EXPECT_TRUE(absl::StrContains(existing.error_message(), "billing:"))
      << "the refusal should name the tenant's prefixes: "
      << existing.error_message();
  EXPECT_EQ(Begin(a, kBilling, "ops:jobs", "exists").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Complete(a, kBilling, "ops:jobs", "exists", 1, "x").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // ...and nothing changed there.
  ASSERT_TRUE(Get(a, kOps, "ops:jobs", "exists", &got).ok());
  EXPECT_EQ(got.record().state(), v1::IN_FLIGHT);
  // A prefix is a prefix of the namespace, not of the key.
  EXPECT_EQ(Begin(a, kBilling, "billing", "k").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  EXPECT_EQ(Metric(*server, "dedup_auth_refusals_total{reason=\"namespace\"}"),
            5);
  EXPECT_EQ(
      Metric(*server, "dedup_auth_refusals_total{reason=\"no_credential\"}"),
      1);
  EXPECT_EQ(
      Metric(*server, "dedup_auth_refusals_total{reason=\"unknown_token\"}"),
      2);
  EXPECT_EQ(Metric(*server, "dedup_tenants"), 2);
}

TEST_F(AuthTest, BatchesAreJudgedItemByItem) {
  DEDUP_START_SERVER(server, {"--tenants_file=" + tenants_file_});
  auto stub = v1::Dedup::NewStub(Channel(server->address(), kBilling));
  v1::BeginBatchRequest begins;
  for (const char* ns : {"billing:a", "ops:b", "billing:c"}) {
    v1::BeginRequest* item = begins.add_items();
    item->set_namespace_(ns);
    item->set_key("k");
    item->set_args_hash("args");
  }
  v1::BeginBatchResponse begun;
  grpc::ClientContext ctx;
  Prepare(&ctx, kBilling);
  ASSERT_TRUE(stub->BeginBatch(&ctx, begins, &begun).ok());
  ASSERT_EQ(begun.items_size(), 3);
  EXPECT_EQ(begun.items(0).response().status(), v1::BeginResponse::STARTED);
  EXPECT_EQ(begun.items(1).error().code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(
      absl::StartsWith(begun.items(1).error().message(), "items[1].namespace:"))
      << begun.items(1).error().message();
  EXPECT_EQ(begun.items(2).response().status(), v1::BeginResponse::STARTED);

  v1::CompleteBatchRequest completes;
  for (int i : {0, 2}) {
    v1::CompleteRequest* item = completes.add_items();
    item->set_namespace_(begins.items(i).namespace_());
    item->set_key("k");
    item->set_fence(begun.items(i).response().fence());
    item->set_outcome(v1::SUCCESS);
    item->set_result("done");
  }
  *completes.add_items() = completes.items(0);
  completes.mutable_items(2)->set_namespace_("ops:b");
  v1::CompleteBatchResponse completed;
  grpc::ClientContext ctx2;
  Prepare(&ctx2, kBilling);
  ASSERT_TRUE(stub->CompleteBatch(&ctx2, completes, &completed).ok());
  EXPECT_EQ(completed.items(0).response().status(), v1::CompleteResponse::OK);
  EXPECT_EQ(completed.items(1).response().status(), v1::CompleteResponse::OK);
  EXPECT_EQ(completed.items(2).error().code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // A checkpoint into a foreign namespace is refused for its item only.
  v1::CheckpointBatchRequest checkpoints;
  for (const char* ns : {"ops:b", "billing:q"}) {
    v1::CheckpointRequest* item = checkpoints.add_items();
    item->set_namespace_(ns);
    item->set_key("k");
    item->set_fence(1);
    item->set_step("s");
  }
  v1::CheckpointBatchResponse checkpointed;
  grpc::ClientContext ctx4;
  Prepare(&ctx4, kBilling);
  ASSERT_TRUE(stub->CheckpointBatch(&ctx4, checkpoints, &checkpointed).ok());
  EXPECT_EQ(checkpointed.items(0).error().code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(checkpointed.items(1).response().status(),
            v1::CheckpointResponse::NOT_FOUND);

  // No credential: the whole batch is refused.
  grpc::ClientContext ctx3;
  Prepare(&ctx3, kNobody);
  EXPECT_EQ(stub->BeginBatch(&ctx3, begins, &begun).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(AuthTest, ForgetAndAdminNeedTheOperatorRole) {
  DEDUP_START_SERVER(server, {"--tenants_file=" + tenants_file_,
                              "--metrics_address=127.0.0.1:0"});
  const std::string a = server->address();
  ASSERT_TRUE(Begin(a, kBilling, "billing:x", "k").ok());
  grpc::Status s = Forget(a, kBilling, "billing:x", "k");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "operator"))
      << s.error_message();
  EXPECT_EQ(Stats(a, kBilling).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Stats(a, kNobody).error_code(), grpc::StatusCode::UNAUTHENTICATED);

  EXPECT_TRUE(Forget(a, kOps, "billing:x", "k").ok());
  EXPECT_TRUE(Stats(a, kOps).ok());
  v1::GetResponse got;
  ASSERT_TRUE(Get(a, kOps, "billing:x", "k", &got).ok());
  EXPECT_FALSE(got.found());
  EXPECT_EQ(Metric(*server, "dedup_auth_refusals_total{reason=\"role\"}"), 2);

  // Health probes need no credential (Kubernetes and load balancers).
  auto health = grpc::health::v1::Health::NewStub(Channel(a, kNobody));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, 3000);
  const grpc::Status checked = health->Check(&ctx, request, &response);
  EXPECT_TRUE(checked.ok()) << checked.error_message();
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(AuthTest, ReloadRevokesATokenAndABadFileKeepsTheOldTenants) {
  DEDUP_START_SERVER(server, {"--tenants_file=" + tenants_file_,
                              "--metrics_address=127.0.0.1:0"});
  const std::string a = server->address();
  ASSERT_TRUE(Begin(a, kBilling, "billing:x", "k").ok());

  // SIGHUP: the billing token is gone at once.
  WriteFileAtomically(tenants_file_,
                      StandardTenantsJson(/*with_billing_token=*/false));
  ASSERT_EQ(kill(server->pid(), SIGHUP), 0);
  EXPECT_TRUE(Eventually(grpc::StatusCode::UNAUTHENTICATED,
                         [&] { return Begin(a, kBilling, "billing:x", "k"); }));

  // A broken file: refused with its line, the tenants in use stay.
  WriteFileAtomically(tenants_file_,
                      "{\"tenants\": [\n  {\"name\": \"ops\",\n"
                      "   \"roles\": [\"admin\"]}\n]}\n");
  ASSERT_EQ(kill(server->pid(), SIGHUP), 0);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!absl::StrContains(server->captured_stderr(), "not reloaded") &&
         std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string log = server->captured_stderr();
  EXPECT_TRUE(absl::StrContains(log, "tenants.json: line 2: tenants[0]"))
      << log;
  EXPECT_TRUE(Begin(a, kOps, "ops:y", "k").ok());
  EXPECT_EQ(Begin(a, kBilling, "billing:x", "k").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_GE(Metric(*server, "dedup_tenants_reloads_total{result=\"error\"}"),
            1);

  // A change to the file is picked up without a signal.
  WriteFileAtomically(tenants_file_, StandardTenantsJson());
  EXPECT_TRUE(Eventually(grpc::StatusCode::OK,
                         [&] { return Begin(a, kBilling, "billing:x", "k"); }));
}

// Returns once `server` reports `count` Begins parked on a key
// (dedup_waiting_begins); false after 10 s.
bool AwaitWaitingBegins(const ServerProcess& server, double count) {
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < give_up) {
    if (ScrapeSample(server.metrics_port(), "dedup_waiting_begins")
            .value_or(-1) >= count) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// A tenant over its rate limit is refused RESOURCE_EXHAUSTED with a RetryInfo
// in the status details; another tenant is not slowed. Parked Begins count
// against the in-flight limit.
TEST_F(AuthTest, TenantLimitsRefuseWithRetryInfo) {
  const std::string json =
      WithLimitedTenant(WithLimitedTenant(StandardTenantsJson(), "burst",
                                          "burst-token", R"({"rps": 20})"),
                        "parked", "parked-token", R"({"inflight": 2})");
  WriteFileAtomically(tenants_file_, json);
  DEDUP_START_SERVER(server, {"--tenants_file=" + tenants_file_,
                              "--metrics_address=127.0.0.1:0"});
  const std::string a = server->address();

  // One connection per tenant, so the 60 calls come faster than the bucket
  // refills (20 per second after a burst of 20) even under a sanitizer on
  // a slow machine: a connection per call took 20 ms a call there.
  const Credentials burst_token = Token("burst-token");
  auto burst = v1::Dedup::NewStub(Channel(a, burst_token));
  auto billing = v1::Dedup::NewStub(Channel(a, kBilling));
  int ok = 0, refused = 0;
  grpc::Status last_refusal;
  for (int i = 0; i < 60; ++i) {
    const grpc::Status s =
        Begin(*burst, burst_token, "burst:x", absl::StrCat("k", i));
    if (s.ok()) {
      ++ok;
    } else {
      ASSERT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << s.error_message();
      ++refused;
      last_refusal = s;
    }
    // The other tenant is not limited by it.
    ASSERT_TRUE(
        Begin(*billing, kBilling, "billing:x", absl::StrCat("k", i)).ok());
  }
  EXPECT_GE(ok, 20);  // the burst, and what refilled meanwhile
  EXPECT_GT(refused, 0);
  EXPECT_TRUE(
      absl::StrContains(last_refusal.error_message(), "20 requests per second"))
      << last_refusal.error_message();
  v1::RpcStatus details;
  ASSERT_TRUE(details.ParseFromString(last_refusal.error_details()));
  EXPECT_EQ(details.code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_EQ(details.details_size(), 1);
  EXPECT_EQ(details.details(0).type_url(),
            "type.googleapis.com/google.rpc.RetryInfo");
  v1::RetryInfo retry;
  ASSERT_TRUE(retry.ParseFromString(details.details(0).value()));
  const int64_t delay_ms = retry.retry_delay().seconds() * 1000 +
                           retry.retry_delay().nanos() / 1'000'000;
  EXPECT_GT(delay_ms, 0);
  EXPECT_LE(delay_ms, 1000);

  // In flight: two Begins parked on a claimed key fill the tenant's slots.
  ASSERT_TRUE(Begin(a, Token("parked-token"), "parked:x", "held").ok());
  std::vector<std::thread> waiters;
  for (int i = 0; i < 2; ++i) {
    waiters.emplace_back([&, i] {
      v1::BeginRequest request;
      request.set_namespace_("parked:x");
      request.set_key("held");
      request.set_args_hash("args");
      request.set_owner(absl::StrCat("waiter-", i));
      request.set_wait_ms(1500);
      v1::BeginResponse response;
      grpc::ClientContext ctx;
      Prepare(&ctx, Token("parked-token"));
      EXPECT_TRUE(v1::Dedup::NewStub(Channel(a, kNobody))
                      ->Begin(&ctx, request, &response)
                      .ok());
    });
  }
  // Both parked (their channels connect in their own time), so both hold a
  // slot; the third call comes well within their wait_ms.
  if (!AwaitWaitingBegins(*server, 2)) {
    for (auto& waiter : waiters) waiter.join();
    FAIL() << "the two waiters never parked";
  }
  const grpc::Status third = Begin(a, Token("parked-token"), "parked:x", "k");
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(third.error_message(), "2 calls in flight"))
      << third.error_message();
  for (auto& waiter : waiters) waiter.join();
  // The slots are given back when the calls end.
  EXPECT_TRUE(Begin(a, Token("parked-token"), "parked:x", "k").ok());
}

// A flood of wrong tokens from one address is refused after its burst,
// before any credential is looked at, while a client from another address
// with a valid token is served. The server listens on every interface (IPv4
// and IPv6), so the flood comes from ::1 and the tenant from 127.0.0.1.
TEST_F(AuthTest, FailedAuthenticationFloodsAreRefusedPerAddress) {
  DEDUP_START_SERVER(
      server,
      {"--address=[::]:0", "--insecure", "--tenants_file=" + tenants_file_,
       "--metrics_address=127.0.0.1:0", "--auth_failure_burst=20",
       // So slow that no failure comes back during the test.
       "--auth_failures_per_s=0.001"});
  const std::string flooder = absl::StrCat("[::1]:", server->port());
  const std::string tenant = absl::StrCat("127.0.0.1:", server->port());
  int unauthenticated = 0, exhausted = 0;
  for (int i = 0; i < 100; ++i) {
    const grpc::Status s =
        Begin(flooder, Token("wrong-token"), "billing:x", absl::StrCat("k", i));
    if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) ++unauthenticated;
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++exhausted;
      EXPECT_TRUE(absl::StrContains(s.error_message(),
                                    "too many failed authentications"))
          << s.error_message();
    }
    // The tenant, interleaved, is never refused.
    const grpc::Status ok =
        Begin(tenant, kBilling, "billing:x", absl::StrCat("k", i));
    ASSERT_TRUE(ok.ok()) << i << ": " << ok.error_message();
  }
  EXPECT_EQ(unauthenticated, 20);
  EXPECT_EQ(exhausted, 80);
  // The address is refused whatever it sends now, a valid token included.
  EXPECT_EQ(Begin(flooder, kBilling, "billing:x", "k").error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(
      Metric(*server, "dedup_auth_refusals_total{reason=\"unknown_token\"}"),
      20);
  EXPECT_EQ(Metric(*server,
                   "dedup_auth_refusals_total{reason=\"too_many_failures\"}"),
            81);
}

// /metrics names the tenants and their stored bytes: with
// --metrics_token_file only a scrape with that bearer token gets the page.
TEST_F(AuthTest, MetricsTokenFileGuardsTheMetricsPage) {
  const std::string token_file = dir_ + "/metrics.token";
  WriteFileAtomically(token_file, "scrape-secret\n");
  DEDUP_START_SERVER(server, {"--tenants_file=" + tenants_file_,
                              "--metrics_address=127.0.0.1:0",
                              "--metrics_token_file=" + token_file});
  const int port = server->metrics_port();
  for (const std::string& headers :
       {std::string(), std::string("Authorization: Bearer wrong\r\n"),
        std::string("Authorization: Basic c2NyYXBlLXNlY3JldA==\r\n"),
        std::string("Authorization: Bearer scrape-secret-and-more\r\n")}) {
    absl::StatusOr<std::string> refused = HttpGet(port, "/metrics", headers);
    ASSERT_FALSE(refused.ok()) << headers;
    EXPECT_TRUE(absl::StrContains(refused.status().message(), " 401 "))
        << headers << ": " << refused.status();
  }
  absl::StatusOr<std::string> page =
      HttpGet(port, "/metrics", "Authorization: Bearer scrape-secret\r\n");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(SampleValue(*page, "dedup_tenants").value_or(-1), 2);
  // A token file that holds no token stops the start.
  WriteFileAtomically(token_file, " \n");
  ProcessResult r =
      RunProcess(ServerBinary(), {"--data_dir=" + dir_ + "/other",
                                  "--metrics_address=127.0.0.1:0",
                                  "--metrics_token_file=" + token_file})
          .value_or(ProcessResult{});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "--metrics_token_file")) << r.output;
}

// dedupd run to its exit, as a short-lived process.
ProcessResult RunDedupd(std::vector<std::string> flags) {
  flags.push_back("--metrics_address=");
  absl::StatusOr<ProcessResult> r = RunProcess(ServerBinary(), flags);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : ProcessResult{};
}

TEST_F(AuthTest, UnsafeOrBrokenSettingsStopTheStart) {
  const std::string data = "--data_dir=" + dir_ + "/data";
  // Not loopback, plaintext, no tenants.
  ProcessResult r = RunDedupd({"--address=0.0.0.0:0", data});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "--insecure")) << r.output;
  // Loopback by its spelling only: the name does not resolve.
  r = RunDedupd({"--address=127.0.0.1.invalid:0", data});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output,
                                "--address 127.0.0.1.invalid:0: host "
                                "'127.0.0.1.invalid' does not resolve"))
      << r.output;
  // TLS but no tenants: still refused off loopback.
  std::vector<std::string> flags = TlsFlags(false);
  flags.push_back("--address=0.0.0.0:0");
  flags.push_back(data);
  r = RunDedupd(flags);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "authentication off")) << r.output;
  // A key that is not the certificate's.
  r = RunDedupd({"--tls_cert_file=" + Pki("server.pem"),
                 "--tls_key_file=" + Pki("server2.key"), data});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "--tls_key_file")) << r.output;
  r = RunDedupd({"--tls_cert_file=" + Pki("server.pem"), data});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  // A tenants file with an error names its line.
  WriteFileAtomically(tenants_file_,
                      "{\"tenants\": [\n  {\"name\": \"x\", \"token_sha256\": "
                      "[\"abc\"],\n   \"roles\": [\"client\"]}]}\n");
  r = RunDedupd({"--tenants_file=" + tenants_file_, data});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "line 2: tenants[0].token_sha256[0]"))
      << r.output;

  // --insecure accepts the risk, and says so.
  DEDUP_START_SERVER(server, {"--address=0.0.0.0:0", "--insecure"});
  EXPECT_TRUE(absl::StrContains(server->captured_stderr(), "WARNING"))
      << server->captured_stderr();
  const absl::Status stopped = server->Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace dedup::testing

namespace dedup::testing {
namespace {

// A backup copies the whole database: operators only.
TEST_F(AuthTest, BackupNeedsTheOperatorRole) {
  DEDUP_START_SERVER(server, {"--tenants_file=" + tenants_file_});
  const std::string a = server->address();
  ASSERT_TRUE(Begin(a, kBilling, "billing:x", "k").ok());
  v1::BackupChunk first;
  // The first message, or the status the call ended with.
  auto backup = [&](const Credentials& c) {
    grpc::ClientContext ctx;
    Prepare(&ctx, c);
    auto reader =
        v1::Admin::NewStub(Channel(a, c))->Backup(&ctx, v1::BackupRequest());
    const bool read = reader->Read(&first);
    if (read) ctx.TryCancel();
    const grpc::Status status = reader->Finish();
    return read ? grpc::Status::OK : status;
  };
  EXPECT_EQ(backup(kBilling).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(backup(kNobody).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const grpc::Status ops = backup(kOps);
  ASSERT_TRUE(ops.ok()) << ops.error_message();
  EXPECT_EQ(first.info().mode(), "single");
}

}  // namespace
}  // namespace dedup::testing
