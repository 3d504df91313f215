// Fast division for the kernels' index math, a linear index into per-dim indices: one
// definition for the ahead-of-time kernels (nvcc), the generated expression kernels (NVRTC,
// which gets this header embedded) and the host that makes the divisors.
#pragma once

#include <cstdint>

namespace tc::cuda {

// Division by a fixed 32-bit divisor as a multiply-high and a shift (Granlund and
// Montgomery's method, as PyTorch's IntDivider): for n, d < 2^31, n / d ==
// (umulhi(n, m) + n) >> s with s = ceil(log2 d), m = 2^32 (2^s - d) / d + 1.
struct FastDivisor {
  uint32_t d = 1, m = 0;
  uint32_t s = 0;
};

#if !defined(__CUDACC_RTC__)
inline FastDivisor MakeFastDivisor(uint32_t d) {
  FastDivisor f;
  f.d = d;
  while ((uint64_t{1} << f.s) < d) ++f.s;
  f.m = static_cast<uint32_t>(
      ((static_cast<unsigned __int128>(1) << 32) * ((uint64_t{1} << f.s) - d)) / d + 1);
  return f;
}
#endif

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
__device__ __forceinline__ uint32_t FastDiv(uint32_t n, const FastDivisor& f) {
  return static_cast<uint32_t>((static_cast<uint64_t>(__umulhi(n, f.m)) + n) >> f.s);
}
#endif

}  // namespace tc::cuda
