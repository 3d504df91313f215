// Who is calling. With bearer tokens configured, every call must carry
// "authorization: Bearer <token>" and is known by the token's name; otherwise by its verified
// client certificate (mutual TLS), or else by its address. Tokens are compared in constant
// time and never logged.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace tc::server {

class Auth {
 public:
  // No tokens: every caller is accepted and known by certificate or address.
  Auth() = default;
  // (name, token) pairs.
  explicit Auth(std::vector<std::pair<std::string, std::string>> tokens)
      : tokens_(std::move(tokens)) {}

  // Tokens from "name:token" lines (a bare token is its own name; # starts a comment), as in
  // a file or, comma-separated, an environment variable.
  static absl::StatusOr<Auth> FromText(const std::string& text, char separator);

  bool requires_token() const { return !tokens_.empty(); }
  // The caller's identity, or UNAUTHENTICATED.
  absl::StatusOr<std::string> Identify(const grpc::CallbackServerContext& ctx) const;

 private:
  std::vector<std::pair<std::string, std::string>> tokens_;
};

// Which client session a call belongs to, for keeping one client's resident tensors on one
// device: `owner` with the session the client names in metadata "tc-session" (a random id each
// of our clients sends; at most 64 bytes), else with its connection (address and port).
std::string SessionKey(const grpc::CallbackServerContext& ctx, const std::string& owner);

}  // namespace tc::server
