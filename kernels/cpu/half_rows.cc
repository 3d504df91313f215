#include "kernels/cpu/half_rows.h"

#include "kernels/scalar_types.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define TC_HAVE_X86 1
#endif

namespace tc::cpu {
namespace {

void HalfToFloatPortable(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Half::ToFloat(src[i]);
}

void FloatToHalfPortable(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Half::FromFloat(src[i]);
}

#if TC_HAVE_X86
__attribute__((target("avx,f16c"))) void HalfToFloatF16C(const uint16_t* src, float* dst,
                                                         int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  HalfToFloatPortable(src + i, dst + i, n - i);
}

__attribute__((target("avx,f16c"))) void FloatToHalfF16C(const float* src, uint16_t* dst,
                                                         int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(dst + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  FloatToHalfPortable(src + i, dst + i, n - i);
}

// CPUID leaf 1: AVX (ECX bit 28), F16C (bit 29), and OSXSAVE (bit 27) with the OS saving the
// YMM state (XCR0 bits 1 and 2). Through cpuid.h, which both GCC and clang have.
bool DetectF16C() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool avx = (c >> 28) & 1, f16c = (c >> 29) & 1, osxsave = (c >> 27) & 1;
  if (!avx || !f16c || !osxsave) return false;
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 6) == 6;
}
#else
bool DetectF16C() { return false; }
#endif

const bool kF16C = DetectF16C();

}  // namespace

bool HalfRowsUseF16C() { return kF16C; }

void HalfToFloatRow(const uint16_t* src, float* dst, int64_t n) {
#if TC_HAVE_X86
  if (kF16C) return HalfToFloatF16C(src, dst, n);
#endif
  HalfToFloatPortable(src, dst, n);
}

void FloatToHalfRow(const float* src, uint16_t* dst, int64_t n) {
#if TC_HAVE_X86
  if (kF16C) return FloatToHalfF16C(src, dst, n);
#endif
  FloatToHalfPortable(src, dst, n);
}

}  // namespace tc::cpu
