// One unary call's bookkeeping, shared by the unary handlers: admission under the drain,
// metrics when it finishes, and the reactor's Finish.
#pragma once

#include <cstdint>
#include <string>

#include "absl/time/clock.h"
#include "server/grpc_status.h"
#include "server/service.h"

namespace tc::server {

// Records one unary call in the metrics when it finishes.
struct UnaryCall {
  const ServiceEnv* env;
  grpc::ServerUnaryReactor* reactor;
  const char* method;
  std::string op;
  absl::Time start = absl::Now();
  int64_t received = 0;
  int64_t sent = 0;
  bool entered = false;

  // Counts the call as in flight, or finishes it UNAVAILABLE when the server drains.
  bool Admit() {
    entered = env->life->Enter();
    if (!entered) Finish(ShuttingDown());
    return entered;
  }

  void Finish(const absl::Status& s) {
    env->metrics->RecordCall(method, op, absl::StatusCodeToString(s.code()), absl::Now() - start);
    env->metrics->AddBytes(method, received, sent);
    reactor->Finish(ToGrpcStatus(s));
    if (entered) env->life->Leave();
  }
};

}  // namespace tc::server
