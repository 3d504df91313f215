#include "kernels/cpu/vector_math.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops/binary.h"
#include "kernels/ops/unary.h"

// GCC only: clang builds (the sanitizer build) got wrong results through these declarations,
// and take the scalar loop instead.
#if defined(__x86_64__) && defined(__GLIBC__) && !defined(__clang__)
#include <immintrin.h>
// libmvec's single-precision functions (x86-64 vector ABI): 4 lanes with SSE, 8 with AVX2, 16
// with AVX-512; the widest the CPU has is used.
extern "C" __m128 _ZGVbN4vv_powf(__m128, __m128);
extern "C" __m256 _ZGVdN8vv_powf(__m256, __m256);
extern "C" __m512 _ZGVeN16vv_powf(__m512, __m512);
#define TC_MVEC_UNARY(fn)                       \
  extern "C" __m128 _ZGVbN4v_##fn(__m128);      \
  extern "C" __m256 _ZGVdN8v_##fn(__m256);      \
  extern "C" __m512 _ZGVeN16v_##fn(__m512);
TC_MVEC_UNARY(expf)
TC_MVEC_UNARY(logf)
TC_MVEC_UNARY(log1pf)
TC_MVEC_UNARY(expm1f)
TC_MVEC_UNARY(sinf)
TC_MVEC_UNARY(cosf)
TC_MVEC_UNARY(tanhf)
TC_MVEC_UNARY(erff)
#undef TC_MVEC_UNARY
#define TC_HAVE_LIBMVEC 1
#endif

namespace tc::cpu {
namespace {

#if !TC_HAVE_LIBMVEC
float ScalarOf(VectorFn fn, float x) {
  switch (fn) {
    case VectorFn::kExp: return std::exp(x);
    case VectorFn::kLog: return std::log(x);
    case VectorFn::kLog1p: return std::log1p(x);
    case VectorFn::kExpm1: return std::expm1(x);
    case VectorFn::kSin: return std::sin(x);
    case VectorFn::kCos: return std::cos(x);
    case VectorFn::kTanh: return std::tanh(x);
    case VectorFn::kErf: return std::erf(x);
  }
  return x;
}
#endif

#if TC_HAVE_LIBMVEC
struct Lanes {
  __m128 (*v4)(__m128);
  __m256 (*v8)(__m256);
  __m512 (*v16)(__m512);
};

#define TC_LANES(fn) Lanes{&_ZGVbN4v_##fn, &_ZGVdN8v_##fn, &_ZGVeN16v_##fn}
Lanes LanesOf(VectorFn fn) {
  switch (fn) {
    case VectorFn::kExp: return TC_LANES(expf);
    case VectorFn::kLog: return TC_LANES(logf);
    case VectorFn::kLog1p: return TC_LANES(log1pf);
    case VectorFn::kExpm1: return TC_LANES(expm1f);
    case VectorFn::kSin: return TC_LANES(sinf);
    case VectorFn::kCos: return TC_LANES(cosf);
    case VectorFn::kTanh: return TC_LANES(tanhf);
    case VectorFn::kErf: return TC_LANES(erff);
  }
  return TC_LANES(expf);
}
#undef TC_LANES

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

__attribute__((target("avx2"))) int64_t UnaryRowAvx2(__m256 (*f)(__m256), const float* a,
                                                     float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(a + i)));
  return i;
}

__attribute__((target("avx512f"))) int64_t UnaryRowAvx512(__m512 (*f)(__m512), const float* a,
                                                          float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, f(_mm512_loadu_ps(a + i)));
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

// The rows below give every element the vector function's result wherever it lies: the last
// few elements of a row go through the same vector code, padded, rather than the scalar
// function, whose results may differ in the last place. (A value's result then does not
// depend on where a loop's blocks happen to start.)
constexpr int64_t kMaxLanes = 16;

void PowRowVector(const float* a, const float* b, float* out, int64_t n) {
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
#else
  for (; i < n; ++i) out[i] = std::pow(a[i], b[i]);
#endif
  if (i < n) {
    float pa[kMaxLanes] = {}, pb[kMaxLanes] = {}, po[kMaxLanes];
    std::copy(a + i, a + n, pa);
    std::copy(b + i, b + n, pb);
    PowRowVector(pa, pb, po, kMaxLanes);
    std::copy(po, po + (n - i), out + i);
  }
}

void UnaryRowVector(VectorFn fn, const float* a, float* out, int64_t n) {
  int64_t i = 0;
#if TC_HAVE_LIBMVEC
  const Lanes lanes = LanesOf(fn);
  if (kAvx512) {
    i = UnaryRowAvx512(lanes.v16, a, out, n);
  } else if (kAvx2) {
    i = UnaryRowAvx2(lanes.v8, a, out, n);
  } else {
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(out + i, lanes.v4(_mm_loadu_ps(a + i)));
  }
#else
  for (; i < n; ++i) out[i] = ScalarOf(fn, a[i]);
#endif
  if (i < n) {
    float pa[kMaxLanes] = {}, po[kMaxLanes];
    std::copy(a + i, a + n, pa);
    UnaryRowVector(fn, pa, po, kMaxLanes);
    std::copy(po, po + (n - i), out + i);
  }
}

}  // namespace

void PowRow(const float* a, const float* b, float* out, int64_t n) { PowRowVector(a, b, out, n); }

void UnaryRow(VectorFn fn, const float* a, float* out, int64_t n) {
  UnaryRowVector(fn, a, out, n);
}

}  // namespace tc::cpu

namespace tc {

void PowOp::HostFloatRow(const float* a, const float* b, float* out, int64_t n) {
  cpu::PowRow(a, b, out, n);
}

#define TC_FLOAT_ROW(Op, fn)                                            \
  void Op::HostFloatRow(const float* a, float* out, int64_t n) {        \
    cpu::UnaryRow(cpu::VectorFn::fn, a, out, n);                        \
  }
TC_FLOAT_ROW(ExpOp, kExp)
TC_FLOAT_ROW(LogOp, kLog)
TC_FLOAT_ROW(Log1pOp, kLog1p)
TC_FLOAT_ROW(Expm1Op, kExpm1)
TC_FLOAT_ROW(SinOp, kSin)
TC_FLOAT_ROW(CosOp, kCos)
TC_FLOAT_ROW(TanhOp, kTanh)
TC_FLOAT_ROW(ErfOp, kErf)
#undef TC_FLOAT_ROW

// 1 / (1 + exp(-a)), the exponential vectorized; `out` holds -a, then exp(-a).
void SigmoidOp::HostFloatRow(const float* a, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = -a[i];
  cpu::UnaryRow(cpu::VectorFn::kExp, out, out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + out[i]);
}

}  // namespace tc
