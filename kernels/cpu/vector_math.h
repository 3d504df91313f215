// Vectorized rows of the transcendental functions that dominate their ops' time on the CPU,
// through glibc's vector math library (libmvec, which picks SSE/AVX2/AVX-512 code at load time),
// and pow's own AVX-512 code (within an ulp of the correctly rounded result). Results agree with
// the scalar functions to within a few ulps. The ops' HostFloatRow
// (binary.h, unary.h) are defined here.
#pragma once

#include <cstdint>

namespace tc::cpu {

// out[i] = pow(a[i], b[i]) in float.
void PowRow(const float* a, const float* b, float* out, int64_t n);

// out[i] = f(a[i]) in float for the functions of glibc's vector math library; out may be a.
enum class VectorFn : uint8_t { kExp, kLog, kLog1p, kExpm1, kSin, kCos, kTanh, kErf };
void UnaryRow(VectorFn fn, const float* a, float* out, int64_t n);

}  // namespace tc::cpu
