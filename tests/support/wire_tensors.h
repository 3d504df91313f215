// Wire tensors for tests: float32 values in, float32 values out, and stream headers.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "tensorcompute/v1/tensor_service.pb.h"

namespace tc::testing {

inline tensorcompute::v1::Tensor Floats(std::vector<int64_t> shape, std::vector<float> values) {
  tensorcompute::v1::Tensor t;
  t.set_dtype(tensorcompute::v1::float32);
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  return t;
}

inline std::vector<float> Values(const tensorcompute::v1::Tensor& t) {
  std::vector<float> v(t.data().size() / 4);
  std::memcpy(v.data(), t.data().data(), v.size() * 4);
  return v;
}

// The first message of a ComputeStream: op `op` on one input of n elements of `dtype`
// (item_bytes each), its data to follow in chunks.
inline tensorcompute::v1::ComputeStreamRequest StreamHeader(const std::string& op,
                                                            tensorcompute::v1::DType dtype,
                                                            int64_t n, int64_t item_bytes) {
  tensorcompute::v1::ComputeStreamRequest header;
  header.mutable_header()->set_op(op);
  tensorcompute::v1::Tensor* in = header.mutable_header()->add_inputs();
  in->set_dtype(dtype);
  in->add_shape(n);
  in->set_storage_bytes(n * item_bytes);
  return header;
}

}  // namespace tc::testing
