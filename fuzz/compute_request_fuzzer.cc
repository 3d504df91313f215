// libFuzzer: bytes as a ComputeRequest through the unary path: decoding, every check on views,
// dtypes, attributes and output options, planning, and the CPU kernels on what passes.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_env.h"
#include "server/v1/decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tensorcompute::v1::ComputeRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  const tc::server::ServiceEnv& env = tc::fuzz::FuzzEnv();
  auto spec = tc::server::DecodeCompute(request, /*allow_streamed=*/false, env.options);
  if (!spec.ok()) return 0;
  auto job = tc::server::ComputeJob::Prepare(*spec, "fuzz", env, absl::InfiniteFuture());
  if (!job.ok()) return 0;
  (void)tc::fuzz::RunJob(**job);
  return 0;
}
