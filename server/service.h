// TensorService on gRPC's callback API. Handlers only decode and queue: the work runs on the
// request pool, which finishes the reactor, so no gRPC thread waits on compute.
#pragma once

#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/engine.h"
#include "tensorcompute/v1/tensor_service.grpc.pb.h"

namespace tc::server {

namespace v1 = ::tensorcompute::v1;

struct ServiceOptions {
  // Largest result a unary Compute returns; a larger one gets RESOURCE_EXHAUSTED before any
  // memory is taken for it.
  int64_t max_response_bytes = int64_t{256} << 20;
};

class TensorServiceImpl final : public v1::TensorService::CallbackService {
 public:
  TensorServiceImpl(Backend* backend, ThreadPool* request_pool, ServiceOptions options)
      : backend_(backend), request_pool_(request_pool), options_(options) {}

  grpc::ServerUnaryReactor* Compute(grpc::CallbackServerContext* ctx,
                                    const v1::ComputeRequest* request,
                                    v1::ComputeResponse* response) override;
  grpc::ServerUnaryReactor* ListOps(grpc::CallbackServerContext* ctx,
                                    const v1::ListOpsRequest* request,
                                    v1::ListOpsResponse* response) override;

 private:
  absl::Status RunCompute(const v1::ComputeRequest& request, v1::ComputeResponse* response);

  Backend* backend_;
  ThreadPool* request_pool_;
  ServiceOptions options_;
};

}  // namespace tc::server
