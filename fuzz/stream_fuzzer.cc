// libFuzzer: bytes as a ComputeStream conversation (messages, each preceded by a 2-byte
// length): a header, then chunks in any order, sizes and offsets, then the end of input.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "fuzz/fuzz_env.h"
#include "server/v1/decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<tensorcompute::v1::ComputeRequest> header;
  std::unique_ptr<tc::server::ComputeSpec> spec;
  std::unique_ptr<tc::server::ComputeJob> job;
  size_t at = 0;
  while (at + 2 <= size) {
    const size_t len = std::min<size_t>(data[at] | (data[at + 1] << 8), size - at - 2);
    at += 2;
    tensorcompute::v1::ComputeStreamRequest m;
    const bool parsed = m.ParseFromArray(data + at, static_cast<int>(len));
    at += len;
    if (!parsed) return 0;
    if (m.has_header()) {
      if (job != nullptr) return 0;  // A second header ends the call.
      header.reset(m.release_header());
      const tc::server::ServiceEnv& env = tc::fuzz::FuzzEnv();
      auto decoded = tc::server::DecodeCompute(*header, /*allow_streamed=*/true, env.options);
      if (!decoded.ok()) return 0;
      spec = std::make_unique<tc::server::ComputeSpec>(*std::move(decoded));
      auto j = tc::server::ComputeJob::Prepare(*spec, "fuzz", env, absl::InfiniteFuture());
      if (!j.ok()) return 0;
      job = *std::move(j);
    } else if (m.has_chunk()) {
      if (job == nullptr ||
          !job->AcceptChunk(m.chunk().tensor(), m.chunk().offset(), m.chunk().data()).ok())
        return 0;
    } else {
      return 0;
    }
  }
  if (job == nullptr || !job->CheckComplete().ok()) return 0;
  (void)tc::fuzz::RunJob(*job);
  return 0;
}
