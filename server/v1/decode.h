// tensorcompute.v1's Compute request (and ComputeStream's header) into the pipeline's request
// (pipeline/request.h).
#pragma once

#include "absl/status/statusor.h"
#include "server/pipeline/codec.h"
#include "server/pipeline/request.h"
#include "server/pipeline/service_env.h"

namespace tc::server {

// `request` as a ComputeSpec: its op (found, arity checked) or expression, each input's view
// and source (inline bytes point into `request`, which must outlive the spec), the
// attributes, output options and where the output goes; every input's shape within `limits`.
// `allow_streamed`: inputs may announce storage_bytes and send their bytes as chunks later
// (ComputeStream). INVALID_ARGUMENT (RESOURCE_EXHAUSTED past a limit) saying what is wrong.
absl::StatusOr<ComputeSpec> DecodeCompute(const v1::ComputeRequest& request, bool allow_streamed,
                                          const ServiceOptions& limits);

}  // namespace tc::server
