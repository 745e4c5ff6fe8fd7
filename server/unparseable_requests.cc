#include "server/unparseable_requests.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/log.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/support/interceptor.h"

namespace dedup {
namespace {

constexpr absl::string_view kDedupService = "/dedup.v1.Dedup/";

// The Method of a dedup.v1.Dedup method name, if it is one we count.
bool DedupMethodOf(absl::string_view name, Method* method) {
  if (!absl::ConsumePrefix(&name, kDedupService)) return false;
  for (int i = 0; i < kMethodCount; ++i) {
    if (name == MethodName(static_cast<Method>(i))) {
      *method = static_cast<Method>(i);
      return true;
    }
  }
  return false;
}

// "dedup.v1.Dedup" of "/dedup.v1.Dedup/Begin".
absl::string_view ServiceOf(absl::string_view path) {
  absl::ConsumePrefix(&path, "/");
  return path.substr(0, path.rfind('/'));
}

// Whether `path` ("/dedup.v1.Dedup/Begin") names a method of this binary's
// protos. Only for those does UNIMPLEMENTED mean a request that did not
// parse; for any other (a newer client's method, e.g. CheckpointBatch sent
// to a server from before it) UNIMPLEMENTED is the truth, and clients fall
// back on it.
bool KnownMethod(absl::string_view path) {
  if (!absl::ConsumePrefix(&path, "/")) return false;
  std::string full_name(path);
  const size_t slash = full_name.rfind('/');
  if (slash == std::string::npos) return false;
  full_name[slash] = '.';
  return google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(
             full_name) != nullptr;
}

class UnparseableRequest final : public grpc::experimental::Interceptor {
 public:
  UnparseableRequest(const char* method_name, Metrics* metrics,
                     const std::vector<std::string>* served)
      : method_name_(method_name), metrics_(metrics), served_(served) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      // (The descriptor lookup only on this rare path, not per call.)
      if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED &&
          KnownMethod(method_name_)) {
        Rewrite(methods);
      }
    }
    methods->Proceed();
  }

 private:
  void Rewrite(grpc::experimental::InterceptorBatchMethods* methods) const {
    const absl::string_view service = ServiceOf(method_name_);
    if (std::find(served_->begin(), served_->end(), service) ==
        served_->end()) {
      methods->ModifySendStatus(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                             NotServedMessage(service)));
      return;
    }
    Method method;
    if (DedupMethodOf(method_name_, &method)) {
      metrics_->RecordInvalid(method, "request");
    }
    methods->ModifySendStatus(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("request: cannot be parsed as the request of ",
                     method_name_,
                     " (malformed protobuf, or a string field that is "
                     "not valid UTF-8)")));
  }

  const char* const method_name_;
  Metrics* const metrics_;
  const std::vector<std::string>* const served_;
};

class UnparseableRequestFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  UnparseableRequestFactory(Metrics* metrics, std::vector<std::string> served)
      : metrics_(metrics), served_(std::move(served)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    if (!absl::StartsWith(info->method(), "/dedup.v1.")) return nullptr;
    return new UnparseableRequest(info->method(), metrics_, &served_);
  }

 private:
  Metrics* const metrics_;
  const std::vector<std::string> served_;
};

std::atomic<int64_t> last_line_ms{-60'000};
std::atomic<int64_t> held_back{0};

void RateLimitedLog(google::protobuf::LogLevel level, const char* filename,
                    int line, const std::string& message) {
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now().time_since_epoch())
          .count();
  int64_t last = last_line_ms.load();
  if (level < google::protobuf::LOGLEVEL_FATAL &&
      (now_ms - last < 60'000 ||
       !last_line_ms.compare_exchange_strong(last, now_ms))) {
    held_back.fetch_add(1);
    return;
  }
  const int64_t skipped = held_back.exchange(0);
  const LogLevel ours =
      level >= google::protobuf::LOGLEVEL_ERROR     ? LogLevel::kError
      : level == google::protobuf::LOGLEVEL_WARNING ? LogLevel::kWarning
                                                    : LogLevel::kInfo;
  Log(ours, "protobuf",
      absl::StrCat(filename, ":", line, ": ", message,
                   skipped > 0 ? absl::StrCat(" (", skipped,
                                              " such lines held back in the "
                                              "last minute)")
                               : ""));
}

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
UnparseableRequestInterceptor(Metrics* metrics,
                              std::vector<std::string> served) {
  return std::make_unique<UnparseableRequestFactory>(metrics,
                                                     std::move(served));
}

std::string NotServedMessage(absl::string_view service) {
  if (service == "dedup.v1.Cluster") {
    return "this node is not in cluster mode (dedup.v1.Cluster is served "
           "by the members of a group: --node_id, --peers)";
  }
  if (service == "dedup.v1.Bench") {
    return "Bench service is off; start dedupd with --enable_bench_service";
  }
  return absl::StrCat(service, " is not served by this node");
}

void QuietProtobufParseErrors() {
  google::protobuf::SetLogHandler(&RateLimitedLog);
}

}  // namespace dedup
