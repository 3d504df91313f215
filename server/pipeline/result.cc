#include "server/pipeline/result.h"

#include <cstring>
#include <utility>

namespace tc::server {

namespace {

TensorView PlannedOutput(const Plan& plan) {
  TensorView v;
  v.dtype = plan.out_dtype;
  v.shape = plan.out_shape;
  v.strides = plan.out_strides;
  v.offset = 0;
  v.storage_bytes = plan.out_storage_bytes;
  return v;
}

}  // namespace

void ComputeResult::Reset() {
  has_output_ = false;
  output_.shape.clear();
  output_.strides.clear();
  output_.offset = 0;
  output_.data = nullptr;
  output_.storage_bytes = 0;
  handle_.clear();
  region_.clear();
  region_offset_ = 0;
  returned_ = false;
  has_bytes_ = false;
  string_.clear();
  lease_.reset();
  data_.reset();
  size_ = 0;
}

void ComputeResult::DescribeOutput(const TensorView& view) {
  Reset();
  has_output_ = true;
  output_ = view;
  output_.data = nullptr;
}

void ComputeResult::SetResident(const TensorView& view, std::string handle) {
  DescribeOutput(view);
  handle_ = std::move(handle);
}

void ComputeResult::SetRegion(const TensorView& view, std::string region, int64_t offset) {
  DescribeOutput(view);
  region_ = std::move(region);
  region_offset_ = offset;
}

std::byte* ComputeResult::PrepareOutput(const Plan& plan) {
  DescribeOutput(PlannedOutput(plan));
  returned_ = has_bytes_ = true;
  size_ = static_cast<size_t>(plan.out_storage_bytes);
  if (bytes_ == Bytes::kString) {
    string_.resize(size_);
    return reinterpret_cast<std::byte*>(string_.data());
  }
  if (buffers_ != nullptr && plan.out_storage_bytes >= kPooledBytes) {
    lease_ = buffers_->Acquire(plan.out_storage_bytes);
  }
  if (lease_ != nullptr) {
    // A reused buffer holds an earlier output: zeroed where the strides leave gaps.
    if (plan.out_has_gaps) std::memset(lease_->data(), 0, size_);
    return lease_->data();
  }
  // Zeroed only where the strides leave gaps (which read as zeros); elsewhere the backend
  // writes every byte.
  data_.reset(plan.out_has_gaps ? new std::byte[size_]() : new std::byte[size_]);
  return data_.get();
}

void ComputeResult::ClearOutput() { Reset(); }

const std::byte* ComputeResult::bytes() const {
  if (!has_bytes_) return nullptr;
  if (bytes_ == Bytes::kString) return reinterpret_cast<const std::byte*>(string_.data());
  return lease_ != nullptr ? lease_->data() : data_.get();
}

std::string ComputeResult::TakeString() {
  has_bytes_ = false;
  size_ = 0;
  return std::move(string_);
}

grpc::Slice ComputeResult::TakeSlice() {
  if (!has_bytes_) return grpc::Slice();
  has_bytes_ = false;
  const size_t n = size_;
  size_ = 0;
  if (bytes_ == Bytes::kString) return grpc::Slice(std::move(string_));
  if (lease_ != nullptr) return LeasedSlice(std::move(lease_), n);
  std::byte* data = data_.release();
  return grpc::Slice(data, n, [](void* p) { delete[] static_cast<std::byte*>(p); });
}

}  // namespace tc::server
