// libFuzzer: bytes as a ComputeRequest through the unary path: decoding, every check on views,
// dtypes, attributes and output options, planning, and the CPU kernels on what passes. Also
// the parse that takes large inputs' bytes out of the message: it must agree with protobuf's.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_env.h"
#include "google/protobuf/util/field_comparator.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/chunk_wire.h"
#include "server/v1/decode.h"

namespace {

// Whatever SplitComputeRequest takes out of `data` and leaves, put back together, is what
// protobuf parses (or both refuse it).
void CheckSplit(const uint8_t* data, size_t size, bool parsed,
                const tensorcompute::v1::ComputeRequest& request) {
  grpc::Slice halves[2] = {grpc::Slice(data, size / 2),
                           grpc::Slice(data + size / 2, size - size / 2)};
  grpc::ByteBuffer buffer(halves, 2);
  tc::wire::SplitMessage split;
  if (!tc::wire::SplitComputeRequest(buffer, 2, &split)) return;
  tensorcompute::v1::ComputeRequest rebuilt;
  if (!rebuilt.ParseFromString(split.rest())) {
    if (parsed) std::abort();
    return;
  }
  if (!parsed) std::abort();
  for (const tc::wire::SplitMessage::Taken& t : split.taken()) {
    if (t.input < 0 || t.input >= rebuilt.inputs_size() || t.size < 2) std::abort();
    std::string bytes(static_cast<size_t>(t.size), '\0');
    split.CopyTo(t, bytes.data());
    rebuilt.mutable_inputs(t.input)->set_data(bytes);
  }
  // Field by field, NaN equal to NaN (a double attribute may hold one).
  google::protobuf::util::DefaultFieldComparator values;
  values.set_treat_nan_as_equal(true);
  google::protobuf::util::MessageDifferencer differ;
  differ.set_field_comparator(&values);
  if (!differ.Compare(request, rebuilt)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tensorcompute::v1::ComputeRequest request;
  const bool parsed = request.ParseFromArray(data, static_cast<int>(size));
  CheckSplit(data, size, parsed, request);
  if (!parsed) return 0;
  const tc::server::ServiceEnv& env = tc::fuzz::FuzzEnv();
  auto spec = tc::server::DecodeCompute(request, /*allow_streamed=*/false, env.options);
  if (!spec.ok()) return 0;
  auto job = tc::server::ComputeJob::Prepare(*spec, "fuzz", env, absl::InfiniteFuture());
  if (!job.ok()) return 0;
  (void)tc::fuzz::RunJob(**job);
  return 0;
}
