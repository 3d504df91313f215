// The open inference protocol (KServe v2, `inference.GRPCInferenceService` as Triton serves it)
// on the same port as TensorService, through the same engine: each op of the catalog is a
// model, and "expression" runs an expression given as a request parameter. A ModelInfer becomes
// a Compute request (its raw input bytes moved, not copied) and goes through the same
// admission, identity, limits, planning and devices; its result's bytes move into
// raw_output_contents.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/service_env.h"

namespace tc::server {

namespace inf = ::inference;

// A model request as a Compute request: the op or expression, the inputs in the op's order
// (raw bytes moved out of `request`, typed contents converted), attributes from the request's
// parameters. Errors are the protocol's: NOT_FOUND for an unknown model or version,
// INVALID_ARGUMENT naming what was expected.
absl::Status ToComputeRequest(inf::ModelInferRequest& request, const ServiceOptions& options,
                              v1::ComputeRequest* out);

// The result of a Compute as the model's response: OUTPUT0 with its datatype and shape, its
// bytes moved into raw_output_contents.
absl::Status ToInferResponse(const inf::ModelInferRequest& request,
                             v1::ComputeResponse& result, inf::ModelInferResponse* out);

// The protocol's datatype name of a dtype ("FP32"), and back (nullopt for names that have no
// dtype here: UINT16-64, BYTES, and any other).
const char* V2DatatypeName(DType t);
std::optional<DType> DTypeFromV2(absl::string_view name);

class InferenceServiceImpl final : public inf::GRPCInferenceService::CallbackService {
 public:
  explicit InferenceServiceImpl(ServiceEnv env) : env_(std::move(env)) {}

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

 private:
  // Serving: not draining, and every device healthy.
  bool Ready() const;

  ServiceEnv env_;
};

}  // namespace tc::server
