#include "kernels/cpu/vector_math.h"

#include <cmath>

#include "kernels/ops/binary.h"

// GCC only: clang builds (the sanitizer build) got wrong results through these declarations,
// and take the scalar loop instead.
#if defined(__x86_64__) && defined(__GLIBC__) && !defined(__clang__)
#include <immintrin.h>
// libmvec's single-precision pow (x86-64 vector ABI): 4 lanes with SSE, 8 with AVX2, 16 with
// AVX-512; the widest the CPU has is used.
extern "C" __m128 _ZGVbN4vv_powf(__m128, __m128);
extern "C" __m256 _ZGVdN8vv_powf(__m256, __m256);
extern "C" __m512 _ZGVeN16vv_powf(__m512, __m512);
#define TC_HAVE_LIBMVEC 1
#endif

namespace tc::cpu {
namespace {

#if TC_HAVE_LIBMVEC
__attribute__((target("avx2,fma"))) int64_t PowRowAvx2(const float* a, const float* b, float* out,
                                                       int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _ZGVdN8vv_powf(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  return i;
}

__attribute__((target("avx512f"))) int64_t PowRowAvx512(const float* a, const float* b, float* out,
                                                        int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, _ZGVeN16vv_powf(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  }
  return i;
}

bool DetectAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}
const bool kAvx512 = DetectAvx512();

bool DetectAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
const bool kAvx2 = DetectAvx2();
#endif

}  // namespace

void PowRow(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = 0;
#if TC_HAVE_LIBMVEC
  if (kAvx512) {
    i = PowRowAvx512(a, b, out, n);
  } else if (kAvx2) {
    i = PowRowAvx2(a, b, out, n);
  } else {
    for (; i + 4 <= n; i += 4) {
      _mm_storeu_ps(out + i, _ZGVbN4vv_powf(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i)));
    }
  }
#endif
  for (; i < n; ++i) out[i] = std::pow(a[i], b[i]);
}

}  // namespace tc::cpu

namespace tc {

void PowOp::HostFloatRow(const float* a, const float* b, float* out, int64_t n) {
  cpu::PowRow(a, b, out, n);
}

}  // namespace tc
