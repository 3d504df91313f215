// libFuzzer: bytes as a KServe v2 ModelInferRequest through the same path as the service:
// the model, inputs, datatypes, shapes, contents and parameters turned into the pipeline's request,
// then every check and the CPU kernels on what passes, and the result back as the model's
// response. The split parse the service reads large raw inputs with (wire::SplitInferRequest)
// must leave a message protobuf parses wherever protobuf parses the whole.
#include <cstddef>
#include <cstdint>

#include <cstdlib>

#include "fuzz/fuzz_env.h"
#include "proto/chunk_wire.h"
#include "server/kserve/inference_service.h"
#include "server/pipeline/result.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  inference::ModelInferRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  {
    grpc::Slice slice(data, size);
    grpc::ByteBuffer buffer(&slice, 1);
    tc::wire::SplitMessage split;
    inference::ModelInferRequest rest;
    if (tc::wire::SplitInferRequest(buffer, 1, &split) && !rest.ParseFromString(split.rest())) {
      std::abort();
    }
  }
  const tc::server::ServiceEnv& env = tc::fuzz::FuzzEnv();
  tc::server::ComputeSpec spec;
  std::optional<tc::server::ShmTarget> output_shm;
  // No shared memory here: requests naming a region are refused.
  if (!tc::server::ToComputeSpec(request, env.options, nullptr, nullptr, &spec, &output_shm).ok()) {
    return 0;
  }
  auto job = tc::server::ComputeJob::Prepare(spec, "fuzz", env, absl::InfiniteFuture());
  if (!job.ok()) return 0;
  if (!tc::fuzz::RunJob(**job).ok()) return 0;
  tc::server::ComputeResult result(tc::server::ComputeResult::Bytes::kString);
  result.PrepareOutput((*job)->plan());
  inference::ModelInferResponse response;
  (void)tc::server::ToInferResponse(request, result, std::nullopt, &response);
  return 0;
}
