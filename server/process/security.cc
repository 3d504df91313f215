#include "server/process/security.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"
#include "server/process/flags.h"
#include "server/env/log.h"

namespace tc::server {
namespace {

std::string ReadFileOrDie(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail(absl::StrCat("--", flag, ": cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::shared_ptr<grpc::ServerCredentials> Credentials() {
  const std::string cert = absl::GetFlag(FLAGS_tls_cert);
  const std::string key = absl::GetFlag(FLAGS_tls_key);
  const std::string client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  if (cert.empty() != key.empty()) Fail("--tls_cert and --tls_key go together");
  if (cert.empty()) {
    if (!client_ca.empty()) Fail("--tls_client_ca needs --tls_cert and --tls_key");
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back(
      {ReadFileOrDie(key, "tls_key"), ReadFileOrDie(cert, "tls_cert")});
  if (!client_ca.empty()) {
    options.pem_root_certs = ReadFileOrDie(client_ca, "tls_client_ca");
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  Log(client_ca.empty() ? "TLS on" : "TLS on, client certificates required");
  return grpc::SslServerCredentials(options);
}

Auth MakeAuth() {
  std::string text;
  char separator = '\n';
  if (const std::string path = absl::GetFlag(FLAGS_auth_tokens_file); !path.empty()) {
    text = ReadFileOrDie(path, "auth_tokens_file");
  } else if (const char* env = std::getenv("TENSORCOMPUTE_AUTH_TOKENS"); env != nullptr) {
    text = env;
    separator = ',';
  } else {
    return Auth();
  }
  auto auth = Auth::FromText(text, separator);
  if (!auth.ok()) Fail(absl::StrCat("bearer tokens: ", auth.status().message()));
  Log("bearer tokens required");
  if (absl::GetFlag(FLAGS_tls_cert).empty()) {
    Log("warning: bearer tokens without TLS travel in clear text");
  }
  return *std::move(auth);
}

}  // namespace tc::server
