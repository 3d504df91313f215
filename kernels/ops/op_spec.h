// What the catalog says of an op: what ListOps shows and what requests are checked against.
// The functor headers are also compiled at run time, by NVRTC for fused expressions
// (kernels/rtc/), where only their device code is wanted: the catalog's side of them (specs,
// attributes, Make) is host code, left out there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/dtype.h"
#include "kernels/scalar_types.h"

#ifdef __CUDACC_RTC__
#define TC_CATALOG_ONLY(...)
#else
#define TC_CATALOG_ONLY(...) __VA_ARGS__
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/ops/attributes.h"
#endif

namespace tc {

// How an op's compute and output dtypes follow from its inputs' result type (PyTorch's
// result_type over the inputs).
enum class TypeRule : uint8_t {
  // Compute in the result type, output it too (add, neg, clamp...).
  kPromote,
  // Like kPromote, but bool and integer result types compute in float32 (div, exp...).
  kPromoteToFloat,
  // Like kPromote, but a bool result type computes and outputs int64 (square, as PyTorch's
  // pow(a, 2) does).
  kBoolToInt64,
  // Compute in the result type, output bool (eq, logical_and, isnan...).
  kToBool,
  // Compute in the input's dtype, output the `dtype` attribute (cast).
  kCastToAttr,
  // int8/uint8 in and out, all inputs one dtype, computed in that type (the quantized ops,
  // whose functors compute in float inside).
  kQuantized,
};

#ifndef __CUDACC_RTC__
struct OpSpec {
  std::string name;
  // Filled in by the catalog from the functor's kArity, which no spec restates.
  int arity = 0;
  std::vector<AttrSpec> attrs;
  // Result types accepted (before any promotion to float), as DTypeBit masks (kAllTypes...).
  uint32_t dtypes = 0;
  std::string description;
  TypeRule rule = TypeRule::kPromote;
  // Input that is a condition (bool) rather than a value: not part of the promotion.
  int condition_input = -1;
  // Extra checks of attributes against the result type, e.g. an integral alpha for integers.
  absl::Status (*check)(const Attrs&, DType result) = nullptr;
  // Filled in by the catalog from kConvertingTiles<F>: the compute types (DTypeBit masks) for
  // which the CUDA tile kernel takes operands of other dtypes too, which the planner may
  // then tile in plans of mixed dtypes.
  uint32_t converting_tiles = 0;
};

inline bool Accepts(const OpSpec& spec, DType t) { return (spec.dtypes & DTypeBit(t)) != 0; }

// An op's spec as its functor states it (in the functor's Spec()); attributes and checks are
// added to what this returns.
inline OpSpec MakeSpec(const char* name, uint32_t accepted, const char* description,
                       TypeRule rule = TypeRule::kPromote) {
  OpSpec s;
  s.name = name;
  s.dtypes = accepted;
  s.description = description;
  s.rule = rule;
  return s;
}

// Integer results need whole-number multipliers, as in PyTorch: INVALID_ARGUMENT when
// attribute `name` is not one and `result` is an integer type.
absl::Status CheckWholeNumber(const Attrs& attrs, DType result, const char* name);

// What a functor's Make gets: the request's attributes and the inputs' result type.
struct MakeArgs {
  const Attrs& attrs;
  DType result;
};
#endif  // __CUDACC_RTC__

// Whether functor F reports integer division by zero through an `int* error` member, which the
// backend points at a flag it checks after the run.
template <typename F, typename = void>
inline constexpr bool kHasErrorFlag = false;
template <typename F>
inline constexpr bool kHasErrorFlag<F, std::void_t<decltype(std::declval<F&>().error)>> = true;

// Tuning an op states about itself, beside its functor, so that no loop names an op.
//
// kLongMath<F>: each element takes long dependent math (transcendental functions, pow). The
// planner unrolls fused trees holding such a call less (CatalogEntry::long_math), and the CUDA
// row kernel keeps four 16-byte packs a thread in flight for its float32 form instead of two
// (measured faster for erf, sigmoid and expm1, near copy speed; figures:
// bench/results/op-traits-tuning-h200.md, long math float32).
template <typename F>
inline constexpr bool kLongMath = false;

// Per width: a value for F's float16/bfloat16, float32 and float64 forms and for its 1-byte
// forms, integer or bool (0: the default).
struct ByWidth {
  int half = 0;
  int single = 0;
  int dbl = 0;
  int byte = 0;

  // The field for elements of `size` bytes: `byte` for 1-byte types (integer or not), the
  // float fields for floating types of 2, 4 and 8 bytes, 0 (no statement) otherwise.
  constexpr int For(size_t size, bool floating) const {
    if (size == 1) return byte;
    if (!floating) return 0;
    return size == 2 ? half : size == 4 ? single : size == 8 ? dbl : 0;
  }
};

// kRowPacks<F>: 16-byte packs a thread in the CUDA row kernel for F's float and 1-byte forms,
// where measurement beat the default (two for 2-byte unary and 4-byte forms, four for float32
// long math, two for float64). More packs keep more loads in flight behind the math; fewer keep the
// registers of long float64 math (erf: 125 with two, 39 with one) from starving the SM of
// threads. Figures: bench/results/op-traits-tuning-h200.md.
template <typename F>
inline constexpr ByWidth kRowPacks{};

// kConvertingTiles<F>: the compute types (DTypeBit masks) for which F's CUDA tile kernel
// also takes operands of other dtypes, converting as it loads and stores (transposed inputs
// or outputs of another dtype than the compute type's). Each is one more kernel to build per
// op and type: casts have it for every type (every cast plan has two dtypes); add, sub, mul
// and div for float32, where float16, bfloat16 and integer operands meet float32 ones.
template <typename F>
inline constexpr uint32_t kConvertingTiles = 0;

// kRowWaves<F>: where nonzero, the row kernel's grid for F's forms is that many rounds
// of the blocks the GPU holds at once, each thread looping over several steps of its row (0:
// a block for every 128 threads' packs, each thread one step). Long float64 math at one pack
// a thread spends much of its time starting threads: 16 rounds measured faster for erf on the
// H200 than a block per 256 elements (figures: bench/results/op-traits-tuning-h200.md, kRowWaves).
template <typename F>
inline constexpr ByWidth kRowWaves{};

// kRowOnePass<F>: where nonzero, the packs a thread of the one-pass row kernel that takes F's
// aligned rows for that form (OnePassRowKernel, kernels/cuda/row_kernel.cuh: a thread for
// every few packs and no loop), in place of RowKernel with its kRowPacks and kRowWaves; 0:
// RowKernel. RowOnePassTakes(f, size, flat) may decline it for some functors of such an op
// (gelu's erf form in float64 but for one row of dense operands); `flat`: the plan is one row
// of dense operands (FlatRowKernel). Figures: bench/results/op-traits-tuning-h200.md.
template <typename F>
inline constexpr ByWidth kRowOnePass{};
#ifndef __CUDACC_RTC__
template <typename F>
inline bool RowOnePassTakes(const F&, size_t /*size*/, bool /*flat*/) {
  return true;
}
#endif

// Wordwise<F>: for storage types S in kTypes, Word<S>(f, a, b) (a unary op: Word<S>(f, a))
// gives in each byte of a 32-bit word what functor f gives for the bytes of words a and b
// there, so that a kernel may apply F to four bytes at once. Bitwise and/or/xor act bit by bit
// on integers and bools (BitwiseWords); logical and/or/xor on bools (whose bytes are 0 or 1:
// the server refuses others) are the bitwise ones; max, min and comparisons of 1-byte types
// take the GPU's byte-wise SIMD instructions, as do add, sub, neg, abs, logical_not and
// bitwise_not (device code only).
template <typename F>
struct Wordwise {
  static constexpr uint32_t kTypes = 0;
};

template <typename Op, uint32_t kWordTypes>
struct BitwiseWords {
  static constexpr uint32_t kTypes = kWordTypes;
  template <typename S, typename F>
  static TC_HOST_DEVICE uint32_t Word(const F&, uint32_t a, uint32_t b) {
    return Op{}(a, b);
  }
};

// 1-byte types (bool among the unsigned ones) on the GPU's byte-wise SIMD instructions:
// Wordwise<F> of an op whose bytes `Signed(a, b)` or `Unsigned(a, b)` compute.
#if defined(__CUDA_ARCH__) && !defined(__CUDACC_RTC__)
#define TC_BYTE_WORDS(F, Signed, Unsigned)                                         \
  template <>                                                                      \
  struct Wordwise<F> {                                                             \
    static constexpr uint32_t kTypes =                                             \
        DTypeBit(DType::kInt8) | DTypeBit(DType::kUInt8) | DTypeBit(DType::kBool); \
    template <typename S>                                                          \
    static __device__ uint32_t Word(const F&, uint32_t a, uint32_t b) {            \
      if constexpr (std::is_signed_v<S>) {                                         \
        return Signed(a, b);                                                       \
      } else {                                                                     \
        return Unsigned(a, b);                                                     \
      }                                                                            \
    }                                                                              \
  };
#else
#define TC_BYTE_WORDS(F, Signed, Unsigned)
#endif

// kNarrowMath<F>: F has `template <bool kFullRange> __device__ float Narrow(float...)`, its
// math for float16 (kFullRange false) and bfloat16 operands (true) where the 16-bit result
// lets it be cheaper than F's float32 math (kernels/ops/math.h says how close it is). The GPU
// computes those dtypes with it, in the op's own kernels and in expressions alike
// (NarrowMath<F, kFullRange> in place of F), so that an expression still means its ops bit
// for bit; the CPU keeps F's float32 math.
template <typename F>
inline constexpr bool kNarrowMath = false;

template <typename F, bool kFullRange>
struct NarrowMath {
  static constexpr uint32_t kComputeTypes = F::kComputeTypes;
  static constexpr int kArity = F::kArity;
  F f;
  template <typename... C>
  TC_HOST_DEVICE float operator()(C... v) const {
#if defined(__CUDA_ARCH__)
    return f.template Narrow<kFullRange>(v...);
#else
    return f(v...);
#endif
  }
};
// The functor the GPU computes F with in storage type S: NarrowMath<F> for float16 and
// bfloat16 where F has narrow math, F itself otherwise.
template <typename S, typename F>
TC_HOST_DEVICE auto GpuMath(const F& f) {
  if constexpr (kNarrowMath<F> && kIsHalfType<S>) {
    return NarrowMath<F, std::is_same_v<S, BFloat16>>{f};
  } else {
    return f;
  }
}
// A functor that wraps op F (the wrapper's type, ..., over template parameters F and P)
// takes F's launch traits.
#define TC_WRAPPER_TRAITS(P, ...)                                     \
  template <typename F, P>                                            \
  inline constexpr bool kLongMath<__VA_ARGS__> = kLongMath<F>;        \
  template <typename F, P>                                            \
  inline constexpr ByWidth kRowPacks<__VA_ARGS__> = kRowPacks<F>;     \
  template <typename F, P>                                            \
  inline constexpr ByWidth kRowWaves<__VA_ARGS__> = kRowWaves<F>;     \
  template <typename F, P>                                            \
  inline constexpr ByWidth kRowOnePass<__VA_ARGS__> = kRowOnePass<F>; \
  template <typename F, P>                                            \
  inline constexpr uint32_t kConvertingTiles<__VA_ARGS__> = kConvertingTiles<F>;
TC_WRAPPER_TRAITS(bool R, NarrowMath<F, R>)

// kForms<F>: functors that hold a run-time choice between forms of their math (gelu's
// `approximate`) state how many forms there are (F::kForms), which one a functor holds
// (f.Form(), 0 to kForms - 1) and give it with its form fixed (F::Fixed<K>(f)). The GPU
// builds an op's kernels once per form, each over FixedForm<F, K>, and chooses at launch:
// a kernel then holds one form's math and registers, not both behind a branch, which measured
// faster for gelu float64's erf form (figures: bench/results/op-traits-tuning-h200.md, kForms).
template <typename F, typename = void>
inline constexpr int kForms = 1;
template <typename F>
inline constexpr int kForms<F, std::void_t<decltype(F::kForms)>> = F::kForms;

template <typename F, int K>
struct FixedForm {
  static constexpr uint32_t kComputeTypes = F::kComputeTypes;
  static constexpr int kArity = F::kArity;
  F f;
  template <typename... C>
  TC_HOST_DEVICE auto operator()(C... v) const {
    return F::template Fixed<K>(f)(v...);
  }
#if defined(__CUDACC__)
  template <bool kFullRange, typename... C>
  __device__ float Narrow(C... v) const {
    return F::template Fixed<K>(f).template Narrow<kFullRange>(v...);
  }
#endif
};
// A form's traits are its op's unless stated for the form (unary.h).
TC_WRAPPER_TRAITS(int K, FixedForm<F, K>)
#undef TC_WRAPPER_TRAITS
template <typename F, int K>
inline constexpr bool kNarrowMath<FixedForm<F, K>> = kNarrowMath<F>;
#ifndef __CUDACC_RTC__
template <typename F, int K>
inline bool RowOnePassTakes(const FixedForm<F, K>& g, size_t size, bool flat) {
  return RowOnePassTakes(F::template Fixed<K>(g.f), size, flat);
}
#endif

// kHasHostFloatRow<F>: F has `static void HostFloatRow(const float*..., float* out, int64_t n)`,
// a vectorized float32 row the CPU calls instead of the functor per element (its results
// agree with the functor's to within a few ulps).
template <typename F, typename = void>
inline constexpr bool kHasHostFloatRow = false;
template <typename F>
inline constexpr bool kHasHostFloatRow<F, std::void_t<decltype(&F::HostFloatRow)>> = true;

}  // namespace tc
