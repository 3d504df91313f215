// absl::Status inside, grpc::Status at the server boundary.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace tc::server {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  // absl's canonical codes are gRPC's codes, number for number.
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace tc::server
