// Running a compute request, from either front door: identity, planning, the run (on the gRPC
// thread when small, else through the request pool and the devices), the result into a
// ComputeReply (whose message KServe v2 converts into its own).
#pragma once

#include <memory>

#include "grpcpp/support/callback_common.h"
#include "server/calls/call.h"
#include "server/pipeline/reply.h"
#include "server/pipeline/request.h"
#include "server/env/service_env.h"

namespace tc::server {

// Runs `spec`; `call` finishes with the outcome. `spec` (and what its inline inputs point
// into) and `reply` must stay valid until then.
void StartCompute(const ServiceEnv& env, grpc::CallbackServerContext* ctx,
                  const ComputeSpec* spec, ComputeReply* reply,
                  std::shared_ptr<Call> call);

}  // namespace tc::server
