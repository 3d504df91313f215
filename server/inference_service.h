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

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/service_env.h"
#include "server/system_shm.h"

namespace tc::server {

namespace inf = ::inference;

// The caller's system shared-memory region of a name; null where the server has none.
using ShmLookup =
    std::function<absl::StatusOr<std::shared_ptr<const SystemShm>>(const std::string& name)>;

// Where an output goes in system shared memory.
struct ShmTarget {
  std::shared_ptr<const SystemShm> region;
  int64_t offset = 0;
  int64_t bytes = 0;
};

// Whether any input or requested output names a shared-memory region.
bool UsesSharedMemory(const inf::ModelInferRequest& request);

// A model request as a Compute request: the op or expression, the inputs in the op's order
// (raw bytes moved out of `request`, typed contents converted, shared-memory inputs read
// through `shm`), attributes from the request's parameters; `output_shm` set where the output
// goes to shared memory. Errors are the protocol's: NOT_FOUND for an unknown model or version,
// INVALID_ARGUMENT naming what was expected.
absl::Status ToComputeRequest(inf::ModelInferRequest& request, const ServiceOptions& options,
                              const ShmLookup& shm, v1::ComputeRequest* out,
                              std::optional<ShmTarget>* output_shm);

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
  // `system_shm`: serve system shared memory (off: its RPCs and tensor parameters are refused).
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

  // The lookup of `owner`'s regions (one that refuses every name where shared memory is off).
  ShmLookup LookupFor(const std::string& owner) const;

 private:
  // Serving: not draining, and every device healthy.
  bool Ready() const;

  ServiceEnv env_;
  // Null where system shared memory is off.
  std::unique_ptr<SystemShmStore> shm_;
};

}  // namespace tc::server
