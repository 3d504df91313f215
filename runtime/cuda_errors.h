// CUDA errors as statuses, and which of them leave the context unusable.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tc::runtime::gpu {

absl::Status CudaError(cudaError_t e, absl::string_view what);

// Errors after which every later call in the context fails the same way ("sticky" in the
// CUDA runtime's documentation): the process has to start over to use the GPU again.
bool IsSticky(cudaError_t e);

}  // namespace tc::runtime::gpu

#define TC_CUDA_RETURN_IF_ERROR(expr, what)           \
  do {                                                \
    if (cudaError_t e_ = (expr); e_ != cudaSuccess)   \
      return ::tc::runtime::gpu::CudaError(e_, what); \
  } while (0)

// In CudaDevice's methods: an error that leaves the context unusable also fails the device.
#define TC_CUDA_CHECK(expr, what)                                                 \
  do {                                                                            \
    if (cudaError_t e_ = (expr); e_ != cudaSuccess) return CudaFailure(e_, what); \
  } while (0)
