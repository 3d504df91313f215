// Wire tensors for tests: float32 values in, float32 values out.
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

}  // namespace tc::testing
