// A unary Compute result on its way out: the response message and, for the front door that
// sends it as bytes, the output's data beside the message rather than inside it.
#pragma once

#include <cstddef>
#include <memory>

#include "grpcpp/support/byte_buffer.h"
#include "kernels/planner.h"
#include "tensorcompute/v1/tensor_service.pb.h"

namespace tc::server {

namespace v1 = ::tensorcompute::v1;

class ComputeReply {
 public:
  // kInMessage: the output's bytes go into message.output.data (for readers of the message,
  // such as KServe v2's conversion). kBeside: into memory of their own, neither zero-filled
  // first nor copied into the message: ToByteBuffer frames them as the message's data.
  enum class Bytes { kInMessage, kBeside };
  explicit ComputeReply(Bytes bytes) : bytes_(bytes) {}

  v1::ComputeResponse message;

  // Fills message.output with the plan's output metadata and returns where its
  // plan.out_storage_bytes bytes are to be written.
  std::byte* PrepareOutput(const Plan& plan);
  // Forgets the output (metadata and bytes), as before PrepareOutput.
  void ClearOutput();
  // The serialized ComputeResponse. The bytes beside the message go with it: the buffer
  // owns them.
  grpc::ByteBuffer ToByteBuffer();

 private:
  Bytes bytes_;
  std::unique_ptr<std::byte[]> data_;
  size_t size_ = 0;
};

}  // namespace tc::server
