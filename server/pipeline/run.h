// Running a compute request, from either front door: identity, planning, the run (on the gRPC
// thread when small, else through the request pool and the devices), the result into a
// ComputeResult, which each front door encodes as its own reply.
#pragma once

#include <memory>

#include "grpcpp/support/callback_common.h"
#include "server/calls/call.h"
#include "server/pipeline/result.h"
#include "server/pipeline/request.h"
#include "server/env/service_env.h"

namespace tc::server {

// Runs `spec` (its identity and regions resolved into it first, once); `call` finishes with
// the outcome. `spec` (and what its inline inputs point into) and `result` must stay valid
// until then.
void StartCompute(const ServiceEnv& env, grpc::CallbackServerContext* ctx, ComputeSpec* spec,
                  ComputeResult* result, std::shared_ptr<Call> call);

}  // namespace tc::server
