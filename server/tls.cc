#include "server/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace dedup {
namespace {

struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Deleter {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using Bio = std::unique_ptr<BIO, BioDeleter>;
using Cert = std::unique_ptr<X509, X509Deleter>;
using Key = std::unique_ptr<EVP_PKEY, KeyDeleter>;

absl::Status FlagError(absl::string_view flag, const std::string& path,
                       absl::string_view what) {
  ERR_clear_error();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " ", path, ": ", what));
}

absl::StatusOr<Bio> Open(absl::string_view flag, const std::string& path) {
  Bio bio(BIO_new_file(path.c_str(), "r"));
  if (bio == nullptr) return FlagError(flag, path, "cannot read the file");
  return bio;
}

// The first certificate of a PEM file.
absl::StatusOr<Cert> ReadCertificates(absl::string_view flag,
                                      const std::string& path) {
  absl::StatusOr<Bio> bio = Open(flag, path);
  if (!bio.ok()) return bio.status();
  Cert first(PEM_read_bio_X509(bio->get(), nullptr, nullptr, nullptr));
  if (first == nullptr) {
    return FlagError(flag, path, "holds no PEM certificate");
  }
  ERR_clear_error();
  return first;
}

}  // namespace

absl::Status CheckTlsFiles(const SecurityConfig& config) {
  if (!config.tls()) return absl::OkStatus();
  absl::StatusOr<Cert> cert =
      ReadCertificates("tls_cert_file", config.tls_cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<Bio> key_bio = Open("tls_key_file", config.tls_key_file);
  if (!key_bio.ok()) return key_bio.status();
  Key key(PEM_read_bio_PrivateKey(key_bio->get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return FlagError("tls_key_file", config.tls_key_file,
                     "holds no unencrypted PEM private key");
  }
  if (X509_check_private_key(cert->get(), key.get()) != 1) {
    return FlagError("tls_key_file", config.tls_key_file,
                     absl::StrCat("is not the key of the certificate in ",
                                  config.tls_cert_file));
  }
  if (!config.tls_client_ca_file.empty()) {
    absl::StatusOr<Cert> ca =
        ReadCertificates("tls_client_ca_file", config.tls_client_ca_file);
    if (!ca.ok()) return ca.status();
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(
    const SecurityConfig& config) {
  if (!config.tls()) return grpc::InsecureServerCredentials();
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          config.tls_key_file, config.tls_cert_file, config.tls_client_ca_file,
          config.tls_reload_interval_s);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (config.tls_client_ca_file.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(
        GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

}  // namespace dedup
