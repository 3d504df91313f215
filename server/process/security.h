// Who may call: the listening ports' credentials (TLS, client certificates) and the bearer
// tokens, from the flags.
#pragma once

#include <memory>

#include "grpcpp/security/server_credentials.h"
#include "server/env/auth.h"

namespace tc::server {

// TLS from --tls_cert, --tls_key (and --tls_client_ca), or plain where none is given.
std::shared_ptr<grpc::ServerCredentials> Credentials();

// The bearer tokens of --auth_tokens_file or TENSORCOMPUTE_AUTH_TOKENS; none required where
// neither is given.
Auth MakeAuth();

}  // namespace tc::server
