#include "server/pipeline/reply.h"

#include "proto/chunk_wire.h"
#include "server/pipeline/codec.h"

namespace tc::server {

std::byte* ComputeReply::PrepareOutput(const Plan& plan) {
  if (bytes_ == Bytes::kInMessage) return tc::server::PrepareOutput(plan, message.mutable_output());
  SetOutputMeta(plan, message.mutable_output());
  size_ = static_cast<size_t>(plan.out_storage_bytes);
  // Zeroed only where the strides leave gaps (which read as zeros); elsewhere the backend
  // writes every byte.
  data_.reset(plan.out_has_gaps ? new std::byte[size_]() : new std::byte[size_]);
  return data_.get();
}

void ComputeReply::ClearOutput() {
  message.clear_output();
  data_.reset();
  size_ = 0;
}

grpc::ByteBuffer ComputeReply::ToByteBuffer() {
  if (data_ == nullptr) {
    const std::string bytes = message.SerializeAsString();
    grpc::Slice only(bytes);
    return grpc::ByteBuffer(&only, 1);
  }
  const std::string meta = message.output().SerializeAsString();
  std::byte* data = data_.release();
  grpc::Slice slice(
      data, size_, [](void* p) { delete[] static_cast<std::byte*>(p); });
  size_ = 0;
  return wire::ComputeResponseMessage(meta, std::move(slice));
}

}  // namespace tc::server
