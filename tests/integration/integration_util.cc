#include "tests/integration/integration_util.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dedup/v1/error_details.pb.h"

namespace dedup::v1 {

void PrintTo(BeginResponse::Status s, std::ostream* os) {
  *os << BeginResponse::Status_Name(s);
}
void PrintTo(CompleteResponse::Status s, std::ostream* os) {
  *os << CompleteResponse::Status_Name(s);
}
void PrintTo(ReleaseResponse::Status s, std::ostream* os) {
  *os << ReleaseResponse::Status_Name(s);
}
void PrintTo(RenewResponse::Status s, std::ostream* os) {
  *os << RenewResponse::Status_Name(s);
}
void PrintTo(Outcome o, std::ostream* os) { *os << Outcome_Name(o); }
void PrintTo(RecordState s, std::ostream* os) { *os << RecordState_Name(s); }

}  // namespace dedup::v1

namespace dedup::testing {
namespace {

// Long enough for any wait_ms the tests use, short enough to fail a hung call.
constexpr int64_t kDeadlineMs = 15000;

void Check(const char* rpc, const grpc::Status& s) {
  if (!s.ok()) {
    ADD_FAILURE() << rpc << " failed: code " << s.error_code() << ": "
                  << s.error_message();
  }
}

}  // namespace

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool UnderSanitizer() {
  return std::getenv("ASAN_OPTIONS") != nullptr ||
         std::getenv("TSAN_OPTIONS") != nullptr;
}

bool ShardedTestCluster() {
  const char* shape = std::getenv("DEDUP_TEST_CLUSTER");
  if (shape == nullptr) return false;
  const char* x = std::strchr(shape, 'x');
  return x != nullptr && std::atoi(x + 1) > 1;
}

void SleepMs(int64_t ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

int OpenDescriptors(pid_t pid) {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(
           absl::StrCat("/proc/", pid, "/fd"))) {
    ++n;
  }
  return n;
}

int64_t PeakRssMib(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (!absl::StartsWith(line, "VmHWM:")) continue;
    std::vector<std::string> parts =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t kib = 0;
    if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kib)) {
      return kib / 1024;
    }
  }
  return -1;
}

int64_t RetryDelayMs(const grpc::Status& s) {
  v1::RpcStatus details;
  if (!details.ParseFromString(s.error_details())) return -1;
  for (const auto& any : details.details()) {
    if (any.type_url() != "type.googleapis.com/google.rpc.RetryInfo") continue;
    v1::RetryInfo retry;
    if (!retry.ParseFromString(any.value())) return -1;
    return retry.retry_delay().seconds() * 1000 +
           retry.retry_delay().nanos() / 1'000'000;
  }
  return -1;
}

std::string TestKey(absl::string_view suffix) {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  return absl::StrCat(info ? info->name() : "key", "/", suffix);
}

void SetDeadline(grpc::ClientContext* ctx, int64_t ms) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(ms));
  // Under load a fresh channel's first connect can fail transiently (seen as
  // UNAVAILABLE "failed to connect to all addresses"); the tests are about
  // the server's answers, so let calls wait for the connection instead.
  ctx->set_wait_for_ready(true);
}

TestClient::TestClient(const std::string& address, std::string ns)
    : ns_(std::move(ns)), stub_(NewStub(address)) {}

v1::BeginRequest TestClient::BeginReq(const std::string& key,
                                      const std::string& owner,
                                      const std::string& args_hash) const {
  v1::BeginRequest req;
  req.set_namespace_(ns_);
  req.set_key(key);
  req.set_owner(owner);
  req.set_args_hash(args_hash);
  return req;
}

grpc::Status TestClient::BeginStatus(const v1::BeginRequest& req,
                                     v1::BeginResponse* resp) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kDeadlineMs);
  return stub_->Begin(&ctx, req, resp);
}

grpc::Status TestClient::CompleteStatus(const v1::CompleteRequest& req,
                                        v1::CompleteResponse* resp) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kDeadlineMs);
  return stub_->Complete(&ctx, req, resp);
}

grpc::Status TestClient::ReleaseStatus(const v1::ReleaseRequest& req,
                                       v1::ReleaseResponse* resp) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kDeadlineMs);
  return stub_->Release(&ctx, req, resp);
}

grpc::Status TestClient::RenewStatus(const v1::RenewRequest& req,
                                     v1::RenewResponse* resp) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kDeadlineMs);
  return stub_->Renew(&ctx, req, resp);
}

grpc::Status TestClient::GetStatus(const v1::GetRequest& req,
                                   v1::GetResponse* resp) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kDeadlineMs);
  return stub_->Get(&ctx, req, resp);
}

grpc::Status TestClient::ForgetStatus(const v1::ForgetRequest& req,
                                      v1::ForgetResponse* resp) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kDeadlineMs);
  return stub_->Forget(&ctx, req, resp);
}

v1::BeginResponse TestClient::Begin(const v1::BeginRequest& req) {
  v1::BeginResponse resp;
  Check("Begin", BeginStatus(req, &resp));
  return resp;
}

v1::BeginResponse TestClient::Begin(const std::string& key,
                                    const std::string& owner) {
  return Begin(BeginReq(key, owner));
}

v1::CompleteResponse TestClient::Complete(const std::string& key,
                                          uint64_t fence,
                                          const std::string& result,
                                          v1::Outcome outcome, uint32_t ttl_s) {
  v1::CompleteRequest req;
  req.set_namespace_(ns_);
  req.set_key(key);
  req.set_fence(fence);
  req.set_outcome(outcome);
  req.set_result(result);
  req.set_ttl_s(ttl_s);
  v1::CompleteResponse resp;
  Check("Complete", CompleteStatus(req, &resp));
  return resp;
}

v1::ReleaseResponse TestClient::Release(const std::string& key,
                                        uint64_t fence) {
  v1::ReleaseRequest req;
  req.set_namespace_(ns_);
  req.set_key(key);
  req.set_fence(fence);
  v1::ReleaseResponse resp;
  Check("Release", ReleaseStatus(req, &resp));
  return resp;
}

v1::RenewResponse TestClient::Renew(const std::string& key, uint64_t fence,
                                    uint32_t lease_ms) {
  v1::RenewRequest req;
  req.set_namespace_(ns_);
  req.set_key(key);
  req.set_fence(fence);
  req.set_lease_ms(lease_ms);
  v1::RenewResponse resp;
  Check("Renew", RenewStatus(req, &resp));
  return resp;
}

v1::GetResponse TestClient::Get(const std::string& key) {
  v1::GetRequest req;
  req.set_namespace_(ns_);
  req.set_key(key);
  v1::GetResponse resp;
  Check("Get", GetStatus(req, &resp));
  return resp;
}

v1::ForgetResponse TestClient::Forget(const std::string& key) {
  v1::ForgetRequest req;
  req.set_namespace_(ns_);
  req.set_key(key);
  v1::ForgetResponse resp;
  Check("Forget", ForgetStatus(req, &resp));
  return resp;
}

}  // namespace dedup::testing
