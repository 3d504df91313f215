#include "server/pipeline/reply.h"

#include <cstring>

#include "proto/chunk_wire.h"
#include "server/pipeline/codec.h"

namespace tc::server {

std::byte* ComputeReply::PrepareOutput(const Plan& plan) {
  if (bytes_ == Bytes::kInMessage) return tc::server::PrepareOutput(plan, message.mutable_output());
  SetOutputMeta(plan, message.mutable_output());
  size_ = static_cast<size_t>(plan.out_storage_bytes);
  lease_.reset();
  data_.reset();
  if (buffers_ != nullptr && plan.out_storage_bytes >= kPooledBytes) {
    lease_ = buffers_->Acquire(plan.out_storage_bytes);
  }
  std::byte* out = nullptr;
  if (lease_ != nullptr) {
    out = lease_->data();
    // A reused buffer holds an earlier output: zeroed where the strides leave gaps.
    if (plan.out_has_gaps) std::memset(out, 0, size_);
  } else {
    // Zeroed only where the strides leave gaps (which read as zeros); elsewhere the backend
    // writes every byte.
    data_.reset(plan.out_has_gaps ? new std::byte[size_]() : new std::byte[size_]);
    out = data_.get();
  }
  return out;
}

void ComputeReply::ClearOutput() {
  message.clear_output();
  lease_.reset();
  data_.reset();
  size_ = 0;
}

grpc::ByteBuffer ComputeReply::ToByteBuffer() {
  if (data_ == nullptr && lease_ == nullptr) {
    const std::string bytes = message.SerializeAsString();
    grpc::Slice only(bytes);
    return grpc::ByteBuffer(&only, 1);
  }
  const std::string meta = message.output().SerializeAsString();
  const size_t n = size_;
  size_ = 0;
  if (lease_ != nullptr) {
    return wire::ComputeResponseMessage(meta, LeasedSlice(std::move(lease_), n));
  }
  std::byte* data = data_.release();
  grpc::Slice slice(
      data, n, [](void* p) { delete[] static_cast<std::byte*>(p); });
  return wire::ComputeResponseMessage(meta, std::move(slice));
}

}  // namespace tc::server
