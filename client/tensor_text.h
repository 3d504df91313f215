// Tensors to and from text, for the command line: "float32[2,3]=1,2,3,4,5,6" in,
// NumPy-style nested lists out.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "tensorcompute/v1/tensor_service.pb.h"

namespace tc::client {

namespace v1 = ::tensorcompute::v1;

// Bytes per element, 0 for DTYPE_UNSPECIFIED or unknown values.
int ElementSize(v1::DType t);

// "DTYPE[d0,d1,...]=v0,v1,..." with values in C order; "float32[]=5" is a rank-0 tensor.
absl::StatusOr<v1::Tensor> ParseTensor(absl::string_view spec);

// "NAME=VALUE": true/false is a bool, a dtype name a dtype, an integer an int, a number a
// float, anything else a string.
absl::StatusOr<std::pair<std::string, v1::Attribute>> ParseAttribute(absl::string_view spec);

// "float32[2,3]\n[[1, 2, 3], [4, 5, 6]]", honouring strides and offset.
absl::StatusOr<std::string> FormatTensor(const v1::Tensor& t);

}  // namespace tc::client
