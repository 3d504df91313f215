#include "kernels/cpu/vector_math.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops/binary.h"
#include "kernels/ops/unary.h"

// GCC only: clang builds (the sanitizer build) got wrong results through these declarations,
// and take the scalar loop instead.
#if defined(__x86_64__) && defined(__GLIBC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics leave placeholder vectors self-initialized (`__m512d __Y = __Y`),
// which -Wmaybe-uninitialized reports wherever they are inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
// libmvec's single-precision functions (x86-64 vector ABI): 4 lanes with SSE, 8 with AVX2, 16
// with AVX-512; the widest the CPU has is used. pow has its own AVX-512 path (below), and
// libmvec's 4 or 8 lanes without AVX-512.
extern "C" __m128 _ZGVbN4vv_powf(__m128, __m128);
extern "C" __m256 _ZGVdN8vv_powf(__m256, __m256);
#define TC_MVEC_UNARY(fn)                  \
  extern "C" __m128 _ZGVbN4v_##fn(__m128); \
  extern "C" __m256 _ZGVdN8v_##fn(__m256); \
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
    case VectorFn::kExp:
      return std::exp(x);
    case VectorFn::kLog:
      return std::log(x);
    case VectorFn::kLog1p:
      return std::log1p(x);
    case VectorFn::kExpm1:
      return std::expm1(x);
    case VectorFn::kSin:
      return std::sin(x);
    case VectorFn::kCos:
      return std::cos(x);
    case VectorFn::kTanh:
      return std::tanh(x);
    case VectorFn::kErf:
      return std::erf(x);
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

#define TC_LANES(fn) \
  Lanes { &_ZGVbN4v_##fn, &_ZGVdN8v_##fn, &_ZGVeN16v_##fn }
Lanes LanesOf(VectorFn fn) {
  switch (fn) {
    case VectorFn::kExp:
      return TC_LANES(expf);
    case VectorFn::kLog:
      return TC_LANES(logf);
    case VectorFn::kLog1p:
      return TC_LANES(log1pf);
    case VectorFn::kExpm1:
      return TC_LANES(expm1f);
    case VectorFn::kSin:
      return TC_LANES(sinf);
    case VectorFn::kCos:
      return TC_LANES(cosf);
    case VectorFn::kTanh:
      return TC_LANES(tanhf);
    case VectorFn::kErf:
      return TC_LANES(erff);
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

// sigmoid in one pass of 16 lanes: 1 / (1 + exp(-x)), the exponential from libmvec as
// UnaryRow computes it, the negation and the division exact: the same bits as the three
// passes of the portable row.
__attribute__((target("avx512f"))) int64_t SigmoidRowAvx512(const float* a, float* out, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_castps_si512(_mm512_loadu_ps(a + i));
    const __m512 e = _ZGVeN16v_expf(_mm512_castsi512_ps(_mm512_xor_si512(x, sign)));
    _mm512_storeu_ps(out + i, _mm512_div_ps(one, _mm512_add_ps(one, e)));
  }
  return i;
}

// pow in float on AVX-512, 16 lanes, computed in double as 2^(y * log2 x):
//   x = z * 2^e with z in [0.984375, 1.984375), cut by the top bits of x - 0.984375 into 16
//   intervals: [0.984375, 1.03125) with c_0 = 1, then 15 of width 1/16 centred on c_j;
//   log2 z = log2 c_j + log2(1 + r) with r = z / c_j - 1, |r| <= 1/32, from its series to r^7
//   (error below 2e-13, and relative to r around x = 1);
//   t = y * log2 x; 2^t = 2^q * 2^(j/16) * 2^f with t = q + j/16 + f, |f| <= 1/32, 2^f from its
//   series to f^4; the double result rounded once to float.
// Within one ulp of the correctly rounded result, and equal to it for all but about one in
// 10^4; exact where the result is (powers of two, x = 1, y = 0). Lanes with x <= 0, x not
// finite, or |y| > 2^20 (where t would need more than double's bits) take the scalar function
// (signs of negative bases, zeros, infinities and NaNs as C's pow). glibc's 16-lane powf is
// slower and less accurate.
struct PowTables {
  alignas(64) double invc[16];
  alignas(64) double nlogc[16];
  alignas(64) double exp2j[16];
};

PowTables MakePowTables() {
  PowTables t{};
  for (int j = 0; j < 16; ++j) {
    const double lo = j == 0 ? 0.984375 : 1.03125 + (j - 1) / 16.0;
    const double hi = j == 0 ? 1.03125 : lo + 1 / 16.0;
    t.invc[j] = j == 0 ? 1.0 : 2.0 / (lo + hi);
    t.nlogc[j] = j == 0 ? 0.0 : -std::log2(t.invc[j]);
    t.exp2j[j] = std::exp2(j / 16.0);
  }
  return t;
}
const PowTables kPowTables = MakePowTables();

__attribute__((target("avx512f,avx512dq"))) inline __m512d Pow8(__m512d x, __m512d y) {
  const PowTables& tab = kPowTables;
  const __m512d one = _mm512_set1_pd(1.0);
  const __m512d shift = _mm512_set1_pd(0x1.8p52);  // adding it leaves an integer in the low bits
  // x's bits less those of 0.984375: the exponent e above, the interval j in the next 4 bits.
  const __m512i ix = _mm512_castpd_si512(x);
  const __m512i d = _mm512_sub_epi64(ix, _mm512_set1_epi64(0x3FEF800000000000LL));
  const __m512d e = _mm512_cvtepi64_pd(_mm512_srai_epi64(d, 52));
  const __m512i j = _mm512_srli_epi64(d, 48);  // the permutes read its low 4 bits
  const __m512i exp_bits = _mm512_set1_epi64(static_cast<int64_t>(0xFFF0000000000000ULL));
  const __m512d z = _mm512_castsi512_pd(_mm512_sub_epi64(ix, _mm512_and_si512(d, exp_bits)));
  const __m512d invc =
      _mm512_permutex2var_pd(_mm512_load_pd(tab.invc), j, _mm512_load_pd(tab.invc + 8));
  const __m512d nlogc =
      _mm512_permutex2var_pd(_mm512_load_pd(tab.nlogc), j, _mm512_load_pd(tab.nlogc + 8));
  const __m512d r = _mm512_fmsub_pd(z, invc, one);
  // log2(1 + r) = (r - r^2/2 + r^3/3 - ...) / ln 2
  constexpr double kInvLn2 = 1.4426950408889634;
  __m512d p = _mm512_set1_pd(kInvLn2 / 7);
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(-kInvLn2 / 6));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kInvLn2 / 5));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(-kInvLn2 / 4));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kInvLn2 / 3));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(-kInvLn2 / 2));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kInvLn2));
  const __m512d log2x = _mm512_fmadd_pd(p, r, _mm512_add_pd(e, nlogc));
  // |t| < 2^28 (|y| <= 2^20): 16 t rounds to an integer through `shift`.
  const __m512d t = _mm512_mul_pd(y, log2x);
  const __m512d t16 = _mm512_fmadd_pd(t, _mm512_set1_pd(16.0), shift);
  const __m512d k = _mm512_sub_pd(t16, shift);
  const __m512d f = _mm512_fnmadd_pd(k, _mm512_set1_pd(1.0 / 16), t);
  // 2^f = e^(f ln 2) = 1 + f ln2 + (f ln2)^2 / 2 + ...
  constexpr double kLn2 = 0.6931471805599453;
  constexpr double kLn2_2 = kLn2 * kLn2, kLn2_3 = kLn2_2 * kLn2, kLn2_4 = kLn2_3 * kLn2;
  __m512d q = _mm512_set1_pd(kLn2_4 / 24);
  q = _mm512_fmadd_pd(q, f, _mm512_set1_pd(kLn2_3 / 6));
  q = _mm512_fmadd_pd(q, f, _mm512_set1_pd(kLn2_2 / 2));
  q = _mm512_fmadd_pd(q, f, _mm512_set1_pd(kLn2));
  const __m512d tj = _mm512_permutex2var_pd(_mm512_load_pd(tab.exp2j), _mm512_castpd_si512(t16),
                                            _mm512_load_pd(tab.exp2j + 8));
  q = _mm512_fmadd_pd(_mm512_mul_pd(q, f), tj, tj);
  // scalef multiplies by 2^floor(k / 16) = 2^q.
  return _mm512_scalef_pd(q, _mm512_mul_pd(k, _mm512_set1_pd(1.0 / 16)));
}

__attribute__((target("avx512f,avx512dq"))) int64_t PowRowAvx512(const float* a, const float* b,
                                                                 float* out, int64_t n) {
  const __m512 inf = _mm512_set1_ps(INFINITY), ymax = _mm512_set1_ps(0x1p20f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(a + i), y = _mm512_loadu_ps(b + i);
    const __mmask16 fast = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ) &
                           _mm512_cmp_ps_mask(x, inf, _CMP_LT_OQ) &
                           _mm512_cmp_ps_mask(_mm512_abs_ps(y), ymax, _CMP_LE_OQ);
    const __m512d xh = _mm512_castps_pd(x), yh = _mm512_castps_pd(y);
    const __m256 lo = _mm512_cvtpd_ps(Pow8(_mm512_cvtps_pd(_mm512_castps512_ps256(x)),
                                           _mm512_cvtps_pd(_mm512_castps512_ps256(y))));
    const __m256 hi =
        _mm512_cvtpd_ps(Pow8(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(xh, 1))),
                             _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(yh, 1)))));
    _mm512_storeu_ps(
        out + i, _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)),
                                                     _mm256_castps_pd(hi), 1)));
    if (fast != 0xFFFF) {
      for (int l = 0; l < 16; ++l) {
        if (!((fast >> l) & 1)) out[i + l] = std::pow(a[i + l], b[i + l]);
      }
    }
  }
  return i;
}

bool DetectAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}
const bool kAvx512 = DetectAvx512();

bool DetectAvx512Dq() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
}
const bool kAvx512Dq = DetectAvx512Dq();

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
  if (kAvx512Dq) {
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

void UnaryRow(VectorFn fn, const float* a, float* out, int64_t n) { UnaryRowVector(fn, a, out, n); }

}  // namespace tc::cpu

namespace tc {

void PowOp::HostFloatRow(const float* a, const float* b, float* out, int64_t n) {
  cpu::PowRow(a, b, out, n);
}

#define TC_FLOAT_ROW(Op, fn)                                     \
  void Op::HostFloatRow(const float* a, float* out, int64_t n) { \
    cpu::UnaryRow(cpu::VectorFn::fn, a, out, n);                 \
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

// 1 / (1 + exp(-a)), the exponential vectorized; `out` holds -a, then exp(-a). With AVX-512
// the whole rows of 16 go through one pass (SigmoidRowAvx512), the rest as below.
void SigmoidOp::HostFloatRow(const float* a, float* out, int64_t n) {
#if TC_HAVE_LIBMVEC
  if (cpu::kAvx512) {
    const int64_t done = cpu::SigmoidRowAvx512(a, out, n);
    a += done;
    out += done;
    n -= done;
  }
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = -a[i];
  cpu::UnaryRow(cpu::VectorFn::kExp, out, out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + out[i]);
}

}  // namespace tc
