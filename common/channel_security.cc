#include "common/channel_security.h"

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/reconnect_backoff.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/client_interceptor.h"

namespace dedup {
namespace {

class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* header)
      : header_(header) {}
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* const header_;  // owned by the factory, lives as long
};

class BearerTokenFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenFactory(std::shared_ptr<const std::string> header)
      : header_(std::move(header)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(header_.get());
  }

 private:
  std::shared_ptr<const std::string> header_;
};

absl::StatusOr<std::string> ReadNonEmpty(const std::string& what,
                                         const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, ": cannot read the file"));
  }
  if (text.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, ": the file is empty"));
  }
  return text.str();
}

}  // namespace

absl::StatusOr<ChannelSecurity> ChannelSecurityFromFiles(
    const std::string& ca_file, const std::string& cert_file,
    const std::string& key_file, const std::string& token_file) {
  ChannelSecurity security;
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(
        "client certificate: give the certificate and its key, or neither");
  }
  const std::pair<const std::string*, std::string*> files[] = {
      {&ca_file, &security.root_ca_pem},
      {&cert_file, &security.client_cert_pem},
      {&key_file, &security.client_key_pem}};
  for (const auto& [path, pem] : files) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> text = ReadNonEmpty("TLS file", *path);
    if (!text.ok()) return text.status();
    *pem = *std::move(text);
    security.tls = true;
  }
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token = ReadNonEmpty("token file", token_file);
    if (!token.ok()) return token.status();
    security.bearer_token = std::string(absl::StripAsciiWhitespace(*token));
    if (security.bearer_token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token file ", token_file, ": holds only whitespace"));
    }
  }
  return security;
}

ChannelFactory SecureChannelFactory(ChannelSecurity security) {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (security.tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = security.root_ca_pem;
    ssl.pem_cert_chain = security.client_cert_pem;
    ssl.pem_private_key = security.client_key_pem;
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  auto header = security.bearer_token.empty()
                    ? nullptr
                    : std::make_shared<const std::string>(
                          absl::StrCat("Bearer ", security.bearer_token));
  return [credentials, header,
          server_name = security.server_name](const std::string& address) {
    grpc::ChannelArguments args;
    if (!server_name.empty()) args.SetSslTargetNameOverride(server_name);
    SetReconnectBackoff(args);
    if (header == nullptr) {
      return grpc::CreateCustomChannel(address, credentials, args);
    }
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(std::make_unique<BearerTokenFactory>(header));
    return grpc::experimental::CreateCustomChannelWithInterceptors(
        address, credentials, args, std::move(interceptors));
  };
}

}  // namespace dedup
