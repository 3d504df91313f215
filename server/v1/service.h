// TensorService on gRPC's callback API. Handlers only decode and queue: copies and planning run
// on the request pool, kernels on the devices' lanes, and completions finish the reactors, so
// no gRPC thread waits on compute or on the GPU.
#pragma once

#include <memory>

#include "server/env/service_env.h"
#include "tensorcompute/v1/tensor_service.grpc.pb.h"
#include "tensorcompute/v1/tensor_service.pb.h"

namespace tc::server {

namespace v1 = ::tensorcompute::v1;

class Call;

// Compute and ComputeStream read their requests as bytes, parsed by ParseRequest
// (server/pipeline/parse.h) so that a request that does not parse gets a status saying why. Compute
// answers in bytes too (a ComputeReply's, whose output data is not copied into a message);
// ComputeStream's responses are protobuf messages as usual.
template <class Base>
class WithParsedComputeRequests : public Base {
 public:
  WithParsedComputeRequests() {
    grpc::Service::MarkMethodCallback(
        0, new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
               [this](grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                      grpc::ByteBuffer* response) { return Compute(ctx, request, response); }));
    grpc::Service::MarkMethodCallback(
        1, new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, v1::TensorStreamMessage>(
               [this](grpc::CallbackServerContext* ctx) { return ComputeStreamBytes(ctx); }));
  }
  virtual grpc::ServerUnaryReactor* Compute(grpc::CallbackServerContext* ctx,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) = 0;
  virtual grpc::ServerBidiReactor<grpc::ByteBuffer, v1::TensorStreamMessage>* ComputeStreamBytes(
      grpc::CallbackServerContext* ctx) = 0;
};

// Upload and Download take raw messages (their chunks skip protobuf's copies, see
// proto/chunk_wire.h); Compute and ComputeStream raw requests; every other method protobuf
// messages.
using TensorServiceBase = WithParsedComputeRequests<v1::TensorService::WithRawCallbackMethod_Upload<
    v1::TensorService::WithRawCallbackMethod_Download<v1::TensorService::CallbackService>>>;

class TensorServiceImpl final : public TensorServiceBase {
 public:
  // `regions` may be null: shared-memory regions are then off; `host_buffers` too: large
  // unary inputs and outputs then take memory of their own.
  TensorServiceImpl(runtime::DeviceSet* devices, ThreadPool* request_pool, ResidentStore* resident,
                    RegionStore* regions, Metrics* metrics, const Auth* auth,
                    ServiceOptions options, Lifecycle* life, HostBuffers* host_buffers = nullptr);

  grpc::ServerUnaryReactor* Compute(grpc::CallbackServerContext* ctx,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, v1::TensorStreamMessage>* ComputeStreamBytes(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Upload(grpc::CallbackServerContext* ctx,
                                                    grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Download(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* ctx,
                                    const v1::ReleaseRequest* request,
                                    v1::ReleaseResponse* response) override;
  grpc::ServerUnaryReactor* ListOps(grpc::CallbackServerContext* ctx,
                                    const v1::ListOpsRequest* request,
                                    v1::ListOpsResponse* response) override;
  grpc::ServerUnaryReactor* ServerInfo(grpc::CallbackServerContext* ctx,
                                       const v1::ServerInfoRequest* request,
                                       v1::ServerInfoResponse* response) override;
  grpc::ServerUnaryReactor* RegisterRegion(grpc::CallbackServerContext* ctx,
                                           const v1::RegisterRegionRequest* request,
                                           v1::RegionInfo* response) override;
  grpc::ServerUnaryReactor* UnregisterRegion(grpc::CallbackServerContext* ctx,
                                             const v1::UnregisterRegionRequest* request,
                                             v1::UnregisterRegionResponse* response) override;
  grpc::ServerUnaryReactor* ListRegions(grpc::CallbackServerContext* ctx,
                                        const v1::ListRegionsRequest* request,
                                        v1::ListRegionsResponse* response) override;

  using Env = ServiceEnv;

 private:
  Env env_;
};

}  // namespace tc::server
