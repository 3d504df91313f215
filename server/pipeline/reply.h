// A unary Compute result on its way out: the response message and, for the front door that
// sends it as bytes, the output's data beside the message rather than inside it.
#pragma once

#include <cstddef>
#include <memory>

#include "grpcpp/support/byte_buffer.h"
#include "kernels/planner.h"
#include "server/pipeline/host_buffers.h"
#include "tensorcompute/v1/tensor_service.pb.h"

namespace tc::server {

namespace v1 = ::tensorcompute::v1;

class ComputeReply {
 public:
  // Outputs this large or larger go into the pool's buffers.
  static constexpr int64_t kPooledBytes = int64_t{1} << 20;

  // kInMessage: the output's bytes go into message.output.data (for readers of the message,
  // such as KServe v2's conversion). kBeside: into memory of their own, neither zero-filled
  // first nor copied into the message: ToByteBuffer frames them as the message's data.
  enum class Bytes { kInMessage, kBeside };
  // kBeside with `buffers`: outputs of at least a MiB go into a buffer of the pool (given
  // back once sent).
  explicit ComputeReply(Bytes bytes, HostBuffers* buffers = nullptr)
      : bytes_(bytes), buffers_(buffers) {}

  v1::ComputeResponse message;

  // Fills message.output with the plan's output metadata and returns where its
  // plan.out_storage_bytes bytes are to be written.
  std::byte* PrepareOutput(const Plan& plan);
  // Whether PrepareOutput's memory is pinned for the devices (a read-back may go straight
  // into it).
  bool output_pinned() const { return lease_ != nullptr && lease_->pinned(); }
  // Forgets the output (metadata and bytes), as before PrepareOutput.
  void ClearOutput();
  // The serialized ComputeResponse. The bytes beside the message go with it: the buffer
  // owns them.
  grpc::ByteBuffer ToByteBuffer();

 private:
  Bytes bytes_;
  HostBuffers* buffers_;
  // The output's bytes: a buffer of the pool, or memory of their own.
  HostBuffers::Lease lease_;
  std::unique_ptr<std::byte[]> data_;
  size_t size_ = 0;
};

}  // namespace tc::server
