// NumPy .npy files (format versions 1-3) to and from wire tensors, for the CLI.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "tensorcompute/v1/tensor_service.pb.h"

namespace tc::client {

// The array in `path` as a tensor: its bytes as storage, with strides for Fortran order (no
// reordering). Little-endian bool, integer and float dtypes; bfloat16 is not a NumPy type.
absl::StatusOr<tensorcompute::v1::Tensor> ReadNpy(const std::string& path);

// Writes `t` (with data) as a C-order .npy file, gathering through its strides and offset.
absl::Status WriteNpy(const std::string& path, const tensorcompute::v1::Tensor& t);

}  // namespace tc::client
