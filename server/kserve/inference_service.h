// The open inference protocol (KServe v2, `inference.GRPCInferenceService` as Triton serves it)
// on the same port as TensorService, through the same engine: each op of the catalog is a
// model, and "expression" runs an expression given as a request parameter (models.h). A
// ModelInfer becomes a Compute request (convert.h) and goes through the same admission,
// identity, limits, planning and devices (infer.cc); shared memory, system and CUDA, is
// registered through its RPCs (shared_memory.cc); health, metadata, statistics and the
// repository index in models.cc.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/data/regions.h"
#include "server/data/system_shm.h"
#include "server/kserve/convert.h"
#include "server/kserve/models.h"
#include "server/env/service_env.h"

namespace tc::server {

// ModelInfer reads and answers bytes: its large raw inputs go from gRPC's slices into the
// server's reused buffers, and its output is sent beside the reply message, not copied into
// it (server/pipeline/parse.h, proto/chunk_wire.h). Every other method takes messages.
using InferenceServiceBase = inf::GRPCInferenceService::WithRawCallbackMethod_ModelInfer<
    inf::GRPCInferenceService::CallbackService>;

class InferenceServiceImpl final : public InferenceServiceBase {
 public:
  // `system_shm`: serve system shared memory (off: its RPCs and tensor parameters are
  // refused). Both kinds of shared memory are registered in env.regions.
  InferenceServiceImpl(ServiceEnv env, bool system_shm);

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* ctx,
                                       const inf::ServerLiveRequest* request,
                                       inf::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* ctx,
                                        const inf::ServerReadyRequest* request,
                                        inf::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* ctx,
                                       const inf::ModelReadyRequest* request,
                                       inf::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* ctx,
                                           const inf::ServerMetadataRequest* request,
                                           inf::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx,
                                          const inf::ModelMetadataRequest* request,
                                          inf::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* ctx,
                                        const inf::ModelConfigRequest* request,
                                        inf::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* ctx,
                                            const inf::ModelStatisticsRequest* request,
                                            inf::ModelStatisticsResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* ctx,
                                            const inf::RepositoryIndexRequest* request,
                                            inf::RepositoryIndexResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* raw,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerBidiReactor<inf::ModelInferRequest, inf::ModelStreamInferResponse>* ModelStreamInfer(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* ctx, const inf::SystemSharedMemoryStatusRequest* request,
      inf::SystemSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* ctx, const inf::SystemSharedMemoryRegisterRequest* request,
      inf::SystemSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* ctx, const inf::SystemSharedMemoryUnregisterRequest* request,
      inf::SystemSharedMemoryUnregisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryStatus(
      grpc::CallbackServerContext* ctx, const inf::CudaSharedMemoryStatusRequest* request,
      inf::CudaSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryRegister(
      grpc::CallbackServerContext* ctx, const inf::CudaSharedMemoryRegisterRequest* request,
      inf::CudaSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryUnregister(
      grpc::CallbackServerContext* ctx, const inf::CudaSharedMemoryUnregisterRequest* request,
      inf::CudaSharedMemoryUnregisterResponse* response) override;

  // The lookup of `owner`'s regions (one that refuses every name where shared memory is off).
  ShmLookup LookupFor(const std::string& owner) const;

 private:
  // Serving: not draining, and every device healthy.
  bool Ready() const;
  // `owner`'s shared memory of one kind (system or CUDA), all of it or the one named;
  // NOT_FOUND where a name is given and no region of that kind has it.
  absl::StatusOr<std::vector<std::shared_ptr<Region>>> Named(const std::string& owner,
                                                             const std::string& name,
                                                             bool system) const;
  // The caller's identity, or FAILED_PRECONDITION where system shared memory is off.
  absl::StatusOr<std::string> SystemShmCaller(const grpc::CallbackServerContext& ctx) const;
  // Registers `region` for `owner` as `name`: one name, one region, of either kind.
  absl::Status Adopt(const std::string& owner, const std::string& name,
                     std::shared_ptr<Region> region);
  // Opens GPU memory by CUDA IPC handle, to be registered.
  absl::StatusOr<std::shared_ptr<Region>> OpenCudaRegion(runtime::Device& device,
                                                         const std::string& handle, int64_t bytes);

  ServiceEnv env_;
  const bool system_shm_;
};

}  // namespace tc::server
