// KServe v2 requests into the pipeline's request, and its result back: a ModelInferRequest
// becomes a ComputeSpec (raw input bytes computed on where they lie; typed contents
// converted; tensors in shared memory read or referenced), and the result the model's
// response.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference/grpc_service.grpc.pb.h"
#include "runtime/device.h"
#include "server/data/regions.h"
#include "server/data/system_shm.h"
#include "server/pipeline/parse.h"
#include "server/pipeline/request.h"
#include "server/pipeline/result.h"
#include "server/env/service_env.h"
#include "tensorcompute/v1/tensor_service.pb.h"

namespace tc::server {

namespace v1 = ::tensorcompute::v1;

namespace inf = ::inference;

// The caller's shared-memory region of a name: its system shared memory (read and written
// through the object), or GPU memory it registered by CUDA IPC handle (which the engine reads
// and writes in place). The lookup is null where the server serves no shared memory.
using ShmLookup = std::function<absl::StatusOr<std::shared_ptr<Region>>(const std::string& name)>;

// Where an output goes in shared memory.
struct ShmTarget {
  std::shared_ptr<Region> region;
  int64_t offset = 0;
  int64_t bytes = 0;
};

// Host memory that bytes read out of system shared memory take until the request ends,
// counted against a device's budget as the v1 paths count what they bring in: the least
// loaded device when the first bytes are read, which the request then runs on (ComputeSpec::
// device) unless its inputs on devices decide.
struct ShmReadBudget {
  runtime::DeviceSet* devices = nullptr;
  runtime::Device* device = nullptr;
  std::vector<std::shared_ptr<void>> held;
  // Counts `bytes` on `device` (chosen now if not yet) until the request ends;
  // RESOURCE_EXHAUSTED past its budget.
  absl::Status Reserve(int64_t bytes);
};

// Whether any input or requested output names a shared-memory region.
bool UsesSharedMemory(const inf::ModelInferRequest& request);

// Whether converting the request (ToComputeSpec) is work for the request pool rather than
// a gRPC thread: it reads shared memory, or converts typed contents element by element. (Raw
// contents only move.)
bool ConvertsOnThePool(const inf::ModelInferRequest& request);

// A model request as the pipeline takes it (pipeline/request.h), as v1's DecodeCompute makes
// one: the op or expression, the inputs in the op's order (raw contents computed on where
// they lie in `request`, which must outlive `out`; typed contents converted and system
// shared memory read into out->owned, each read counted in `budget` first (and the request
// run on that device); CUDA shared
// memory referenced), attributes from the request's parameters; `output_shm` set where the
// output goes to shared memory. Errors are the protocol's: NOT_FOUND for an unknown model or
// version, INVALID_ARGUMENT naming what was expected, RESOURCE_EXHAUSTED past a limit or the
// budget. `outside`: raw_input_contents entries taken out of `request` as it was parsed
// (ParseWithOutside with wire::SplitInferRequest), computed on where they lie.
absl::Status ToComputeSpec(const inf::ModelInferRequest& request, const ServiceOptions& options,
                           const ShmLookup& shm, ShmReadBudget* budget, ComputeSpec* out,
                           std::optional<ShmTarget>* output_shm,
                           const OutsideData* outside = nullptr);

// The result of the computation as the model's response: OUTPUT0 with its datatype and shape, its
// bytes moved into raw_output_contents, or written to `output_shm` (the entry then empty).
// `bytes_beside`: the bytes are left in `result` for EncodeInferResponse, and no entry added.
absl::Status ToInferResponse(const inf::ModelInferRequest& request, ComputeResult& result,
                             const std::optional<ShmTarget>& output_shm,
                             inf::ModelInferResponse* out, bool bytes_beside = false);

// The response on the wire: `meta` (from ToInferResponse with bytes_beside) and the result's
// bytes as its raw_output_contents entry, referenced, not copied (an empty entry where the
// output went to shared memory).
grpc::ByteBuffer EncodeInferResponse(const inf::ModelInferResponse& meta, ComputeResult& result,
                                     const std::optional<ShmTarget>& output_shm);

}  // namespace tc::server
