// The standard services beside dedup.v1.Dedup: health checking and server
// reflection (what grpcurl and load balancers rely on).

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace dedup::testing {
namespace {

namespace health = ::grpc::health::v1;
namespace reflection = ::grpc::reflection::v1alpha;

class ServiceTest : public SharedServerTest<ServiceTest> {
 public:
  static std::vector<std::string> Flags() { return {"--durability=none"}; }

 protected:
  std::shared_ptr<grpc::Channel> Channel() {
    return grpc::CreateChannel(server().address(),
                               grpc::InsecureChannelCredentials());
  }

  // One request on a reflection stream.
  reflection::ServerReflectionResponse Reflect(
      const reflection::ServerReflectionRequest& req) {
    auto stub = reflection::ServerReflection::NewStub(Channel());
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 5000);
    auto stream = stub->ServerReflectionInfo(&ctx);
    reflection::ServerReflectionResponse resp;
    EXPECT_TRUE(stream->Write(req));
    stream->WritesDone();
    EXPECT_TRUE(stream->Read(&resp));
    reflection::ServerReflectionResponse extra;
    while (stream->Read(&extra)) {
    }
    const grpc::Status s = stream->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }
};

TEST_F(ServiceTest, HealthIsServing) {
  auto stub = health::Health::NewStub(Channel());
  health::HealthCheckRequest req;
  health::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, 5000);
  const grpc::Status s = stub->Check(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.status(), health::HealthCheckResponse::SERVING);
}

TEST_F(ServiceTest, ReflectionListsTheServices) {
  reflection::ServerReflectionRequest req;
  req.set_list_services("");
  const reflection::ServerReflectionResponse resp = Reflect(req);
  std::vector<std::string> names;
  for (const auto& service : resp.list_services_response().service()) {
    names.push_back(service.name());
  }
  const std::string all = absl::StrJoin(names, ", ");
  for (const char* want : {"dedup.v1.Dedup", "grpc.health.v1.Health"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end())
        << want << " not in [" << all << "]";
  }
}

TEST_F(ServiceTest, ReflectionDescribesTheDedupService) {
  reflection::ServerReflectionRequest req;
  req.set_file_containing_symbol("dedup.v1.Dedup");
  const reflection::ServerReflectionResponse resp = Reflect(req);
  ASSERT_TRUE(resp.has_file_descriptor_response())
      << resp.ShortDebugString().substr(0, 500);
  bool found = false;
  for (const std::string& bytes :
       resp.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    if (file.name() != "dedup/v1/dedup.proto") continue;
    found = true;
    ASSERT_EQ(file.service_size(), 1);
    std::vector<std::string> methods;
    for (const auto& m : file.service(0).method()) methods.push_back(m.name());
    EXPECT_EQ(absl::StrJoin(methods, ","),
              "Begin,Complete,Release,Renew,Get,Forget,BeginBatch,"
              "CompleteBatch,Checkpoint,CheckpointBatch,Session");
  }
  EXPECT_TRUE(found) << "no dedup/v1/dedup.proto in the answer";
}

}  // namespace
}  // namespace dedup::testing
