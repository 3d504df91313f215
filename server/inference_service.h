// The open inference protocol (KServe v2, `inference.GRPCInferenceService` as Triton serves it)
// on the same port as TensorService, through the same engine: each op of the catalog is a
// model, and "expression" runs an expression given as a request parameter. A ModelInfer becomes
// a Compute request (its raw input bytes moved, not copied) and goes through the same
// admission, identity, limits, planning and devices; its result's bytes move into
// raw_output_contents.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/regions.h"
#include "server/service_env.h"
#include "server/system_shm.h"

namespace tc::server {

namespace inf = ::inference;

// A shared-memory region a tensor names: the caller's system shared memory, or GPU memory it
// registered by CUDA IPC handle (held as a tensorcompute.v1 region, which the engine reads
// and writes in place).
struct SharedRegion {
  std::shared_ptr<const SystemShm> system;
  std::shared_ptr<Region> cuda;
};

// The caller's region of a name; null where the server serves no shared memory.
using ShmLookup = std::function<absl::StatusOr<SharedRegion>(const std::string& name)>;

// Where an output goes in shared memory.
struct ShmTarget {
  SharedRegion region;
  int64_t offset = 0;
  int64_t bytes = 0;
};

// Host memory that bytes read out of system shared memory take until the request ends,
// counted against a device's budget as the v1 paths count what they bring in.
struct ShmReadBudget {
  // Counts `bytes` until the handle goes; RESOURCE_EXHAUSTED past the budget.
  std::function<absl::StatusOr<std::shared_ptr<void>>(int64_t bytes)> reserve;
  std::vector<std::shared_ptr<void>> held;
};

// Whether any input or requested output names a shared-memory region.
bool UsesSharedMemory(const inf::ModelInferRequest& request);

// A model request as a Compute request: the op or expression, the inputs in the op's order
// (raw bytes moved out of `request`, typed contents converted, shared-memory inputs read
// through `shm`, each counted in `budget` before it is read), attributes from the request's
// parameters; `output_shm` set where the output goes to shared memory. Errors are the
// protocol's: NOT_FOUND for an unknown model or version, INVALID_ARGUMENT naming what was
// expected, RESOURCE_EXHAUSTED past a limit or the budget.
absl::Status ToComputeRequest(inf::ModelInferRequest& request, const ServiceOptions& options,
                              const ShmLookup& shm, ShmReadBudget* budget,
                              v1::ComputeRequest* out, std::optional<ShmTarget>* output_shm);

// The result of a Compute as the model's response: OUTPUT0 with its datatype and shape, its
// bytes moved into raw_output_contents, or written to `output_shm` (the entry then empty).
absl::Status ToInferResponse(const inf::ModelInferRequest& request, v1::ComputeResponse& result,
                             const std::optional<ShmTarget>& output_shm,
                             inf::ModelInferResponse* out);

// The protocol's datatype name of a dtype ("FP32"), and back (nullopt for names that have no
// dtype here: UINT16-64, BYTES, and any other).
const char* V2DatatypeName(DType t);
std::optional<DType> DTypeFromV2(absl::string_view name);

class InferenceServiceImpl final : public inf::GRPCInferenceService::CallbackService {
 public:
  // `system_shm`: serve system shared memory, its registrations counted against the cap
  // (null: off, its RPCs and tensor parameters are refused).
  InferenceServiceImpl(ServiceEnv env, MappedBytes* system_shm);

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
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx,
                                       const inf::ModelInferRequest* request,
                                       inf::ModelInferResponse* response) override;
  grpc::ServerBidiReactor<inf::ModelInferRequest, inf::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* ctx) override;
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
  // `owner`'s CUDA regions registered here (not those of tensorcompute.v1's socket), all or
  // the one named.
  std::vector<std::shared_ptr<Region>> CudaRegions(const std::string& owner,
                                                   const std::string& name) const;
  // CudaRegions, NOT_FOUND where a name is given and none has it.
  absl::StatusOr<std::vector<std::shared_ptr<Region>>> NamedCudaRegions(
      const std::string& owner, const std::string& name) const;
  // The caller's identity, or FAILED_PRECONDITION where system shared memory is off.
  absl::StatusOr<std::string> SystemShmCaller(const grpc::CallbackServerContext& ctx) const;

  ServiceEnv env_;
  // Null where system shared memory is off.
  std::unique_ptr<SystemShmStore> shm_;
};

}  // namespace tc::server
