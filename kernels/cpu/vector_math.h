// Vectorized rows of the transcendental functions that dominate their ops' time on the CPU,
// through glibc's vector math library (libmvec, which picks SSE/AVX2/AVX-512 code at load time).
// Results agree with the scalar functions to within a few ulps.
#pragma once

#include <cstdint>

namespace tc::cpu {

// out[i] = pow(a[i], b[i]) in float.
void PowRow(const float* a, const float* b, float* out, int64_t n);

}  // namespace tc::cpu
