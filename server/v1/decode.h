// tensorcompute.v1's Compute request (and ComputeStream's header) into the pipeline's request
// (pipeline/request.h).
#pragma once

#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/v1/codec.h"
#include "server/pipeline/host_buffers.h"
#include "server/pipeline/parse.h"
#include "server/pipeline/request.h"
#include "server/env/service_env.h"
#include "tensorcompute/v1/tensor_service.pb.h"

namespace tc::server {

namespace v1 = ::tensorcompute::v1;

// `request` as a ComputeSpec: its op (found, arity checked) or expression, each input's view
// and source (inline bytes point into `request`, which must outlive the spec), the
// attributes, output options and where the output goes; every input's shape within `limits`.
// `allow_streamed`: inputs may announce storage_bytes and send their bytes as chunks later
// (ComputeStream). INVALID_ARGUMENT (RESOURCE_EXHAUSTED past a limit) saying what is wrong.
// `outside`: where inputs' bytes were taken out of `request` (ParseComputeRequest).
absl::StatusOr<ComputeSpec> DecodeCompute(const v1::ComputeRequest& request, bool allow_streamed,
                                          const ServiceOptions& limits,
                                          const OutsideData* outside = nullptr);

// ParseWithOutside for a Compute request: inline inputs of at least kOutsideBytes go into
// the pool's buffers, their data fields in `request` left empty.
absl::Status ParseComputeRequest(const grpc::ByteBuffer& buffer, v1::ComputeRequest* request,
                                 HostBuffers* buffers, OutsideData* outside);

}  // namespace tc::server
