// One unary call's bookkeeping, shared by the unary handlers: admission under the drain,
// metrics when it finishes, and the reactor's Finish.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "server/calls/grpc_status.h"
#include "server/pipeline/request.h"
#include "server/v1/service.h"

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
  // Where set, takes the outcome instead of `reactor`: a call that answers in another message
  // (ModelInfer, a stream's response) converts the result and finishes its own way.
  std::function<void(const absl::Status&)> complete = nullptr;

  // Counts the call as in flight, or finishes it UNAVAILABLE when the server drains.
  bool Admit() {
    entered = env->life->Enter();
    if (!entered) Finish(ShuttingDown());
    return entered;
  }

  void Finish(const absl::Status& s) {
    env->metrics->RecordCall(method, op, absl::StatusCodeToString(s.code()), absl::Now() - start);
    env->metrics->AddBytes(method, received, sent);
    if (complete) {
      std::function<void(const absl::Status&)> c = std::move(complete);
      complete = nullptr;
      c(s);
    } else {
      reactor->Finish(ToGrpcStatus(s));
    }
    if (entered) env->life->Leave();
  }
};

// Runs a compute request, from either front door: identity, planning, the run (on the gRPC
// thread when small, else through the request pool and the devices), the result into
// `response`; `call` finishes with the outcome. `spec` (and what its inline inputs point into)
// and `response` must stay valid until then.
void StartCompute(const ServiceEnv& env, grpc::CallbackServerContext* ctx,
                  const ComputeSpec* spec, v1::ComputeResponse* response,
                  std::shared_ptr<UnaryCall> call);

}  // namespace tc::server
