// The CUDA kernels over every op family on every dtype class it accepts, and over the layout
// classes (contiguous, each broadcast path, zero-dim and attribute scalars, permutations of
// rank 2 to 7, slices and steps, row slices aligned and not, negative strides, misaligned
// offsets, broadcasts that do not coalesce, casts through transposes), each beside PyTorch
// running the same op on the same views in the same invocation.
//
//   tensorcompute-gpu-matrix-bench [--torch=torch_matrix.py] [--reps=30] [--only=SUBSTRING]
//                                  [--group=GROUP[,GROUP]] [--list] [--cases_json=FILE]
//                                  [--markdown=FILE] [--json=FILE]
//
// The case list is this file's; it is written as JSON (dtype, shape, strides, offset, storage
// size and value range of every input; op and attributes) for the PyTorch script, which builds
// the same views with as_strided and times the same op the same way (--cases_json writes
// that file and stops, for running PyTorch's side alone): the median over --reps of
// CUDA events around one call after 10 warm-ups (gpu_common.h). Ours is the engine's path as
// the server runs it: PrepareOp, then cuda::LaunchOp, every call. Each case's output is checked
// against the CPU backend (integers exactly, floating values within a few units in the last
// place; transcendental functions within more); a difference makes the exit status 1. Beside
// each case, a device-to-device copy moving the case's bytes (output and every input view,
// numel x item size), timed the same way: % same-size copy is that copy's time over ours.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/gpu_common.h"
#include "kernels/cuda/launch_env.h"
#include "kernels/scalar_types.h"

namespace tc {
namespace {

using bench::DevBuf;

// An input: its view and the range its values are drawn from (uniform; integers in [lo, hi)).
struct In {
  DType dtype;
  DimVector shape, strides;
  int64_t offset = 0;
  double lo = -2, hi = 2;
};

struct Case {
  std::string group, name, op;
  std::vector<In> inputs;
  AttrMap attrs;
  DimVector out_strides;  // empty: contiguous
  int64_t ulps = 2;       // floating tolerance against the CPU backend
  double abs_tol = 0;     // and an absolute one, for results that cancel
};

In Dense(DType t, DimVector shape, double lo = -2, double hi = 2) {
  In in{t, shape, ContiguousStrides(shape), 0, lo, hi};
  return in;
}

In Strided(DType t, DimVector shape, DimVector strides, int64_t offset, double lo = -2,
           double hi = 2) {
  return In{t, std::move(shape), std::move(strides), offset, lo, hi};
}

// Elements of storage the view needs (its offset and strides already keep it at or above 0).
int64_t StorageElements(const In& in) {
  int64_t top = in.offset;
  for (size_t d = 0; d < in.shape.size(); ++d) {
    if (in.shape[d] == 0) return 0;
    if (in.strides[d] > 0) top += (in.shape[d] - 1) * in.strides[d];
  }
  return top + 1;
}

int64_t Numel(const DimVector& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// A contiguous tensor of `shape` seen through the permutation `perm` (view dim k is the
// tensor's dim perm[k]), as x.permute(perm) gives.
In Permuted(DType t, const DimVector& shape, const std::vector<int>& perm) {
  const DimVector c = ContiguousStrides(shape);
  DimVector s, st;
  for (int p : perm) {
    s.push_back(shape[static_cast<size_t>(p)]);
    st.push_back(c[static_cast<size_t>(p)]);
  }
  return In{t, s, st, 0, -2, 2};
}

const char* Short(DType t) {
  switch (t) {
    case DType::kBool:
      return "bool";
    case DType::kUInt8:
      return "u8";
    case DType::kInt8:
      return "i8";
    case DType::kInt16:
      return "i16";
    case DType::kInt32:
      return "i32";
    case DType::kInt64:
      return "i64";
    case DType::kFloat16:
      return "f16";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat32:
      return "f32";
    case DType::kFloat64:
      return "f64";
  }
  return "?";
}

std::vector<Case> AllCases() {
  using D = DType;
  const int64_t N = int64_t{1} << 26, M = 8192;
  const std::vector<D> floats = {D::kFloat16, D::kBFloat16, D::kFloat32, D::kFloat64};
  const std::vector<D> ints = {D::kUInt8, D::kInt8, D::kInt16, D::kInt32, D::kInt64};
  std::vector<Case> cs;
  auto add = [&](const std::string& group, const std::string& name, const std::string& op,
                 std::vector<In> inputs, AttrMap attrs = {}, int64_t ulps = 2) {
    cs.push_back(Case{group, name, op, std::move(inputs), std::move(attrs), {}, ulps, 0});
  };
  // The device fuses multiply-adds (one rounding where the CPU rounds twice), and gelu's
  // 1 + erf(x / sqrt 2) cancels for negative x: an ulp of difference in a product or in erf
  // is a larger relative one in such results, though both are within a unit of the inputs'
  // scale (values here are of magnitude 4 or less).
  auto cancels = [&](DType t) { cs.back().abs_tol = t == DType::kFloat64 ? 1e-13 : 1e-5; };
  // Integer ranges that keep every value of every integer type in range and divisors nonzero.
  auto ilo = [](D t) { return t == D::kUInt8 ? 0.0 : -100.0; };

  // Binary arithmetic on each floating type.
  for (D t : floats) {
    const std::string s = Short(t);
    for (const char* op : {"add", "mul", "div", "maximum", "remainder"}) {
      add("arith", absl::StrCat(op, "_", s), op, {Dense(t, {N}), Dense(t, {N}, 0.5, 2)});
    }
    add("arith", absl::StrCat("pow_", s), "pow", {Dense(t, {N}, 0.5, 2), Dense(t, {N})}, {}, 4);
    add("arith", absl::StrCat("atan2_", s), "atan2", {Dense(t, {N}), Dense(t, {N})}, {}, 4);
  }
  // Comparisons (bool out).
  for (D t :
       {D::kFloat16, D::kBFloat16, D::kFloat32, D::kFloat64, D::kInt8, D::kInt32, D::kInt64}) {
    add("compare", absl::StrCat("gt_", Short(t)), "gt",
        {Dense(t, {N}, ilo(t), 100), Dense(t, {N}, ilo(t), 100)});
  }
  add("compare", "eq_i32", "eq", {Dense(D::kInt32, {N}, 0, 4), Dense(D::kInt32, {N}, 0, 4)});
  add("compare", "isnan_f32", "isnan", {Dense(D::kFloat32, {N})});
  // Logical and bitwise.
  for (const char* op : {"logical_and", "logical_or", "logical_xor"}) {
    add("logical", absl::StrCat(op, "_bool"), op, {Dense(D::kBool, {N}), Dense(D::kBool, {N})});
  }
  add("logical", "logical_not_bool", "logical_not", {Dense(D::kBool, {N})});
  add("logical", "logical_and_f32", "logical_and",
      {Dense(D::kFloat32, {N}), Dense(D::kFloat32, {N})});
  for (D t : {D::kUInt8, D::kInt8, D::kInt32, D::kInt64}) {
    add("logical", absl::StrCat("bitwise_and_", Short(t)), "bitwise_and",
        {Dense(t, {N}, ilo(t), 100), Dense(t, {N}, ilo(t), 100)});
  }
  add("logical", "bitwise_xor_i16", "bitwise_xor",
      {Dense(D::kInt16, {N}, -100, 100), Dense(D::kInt16, {N}, -100, 100)});
  add("logical", "bitwise_not_i32", "bitwise_not", {Dense(D::kInt32, {N}, -100, 100)});
  add("logical", "left_shift_i32", "left_shift",
      {Dense(D::kInt32, {N}, -100, 100), Dense(D::kInt32, {N}, 0, 8)});
  add("logical", "right_shift_i64", "right_shift",
      {Dense(D::kInt64, {N}, -100, 100), Dense(D::kInt64, {N}, 0, 8)});
  // Transcendental unary functions.
  for (D t : floats) {
    for (const char* op : {"sigmoid", "tanh", "exp", "log", "erf", "sin", "silu"}) {
      const bool positive = std::strcmp(op, "log") == 0;
      add("unary_math", absl::StrCat(op, "_", Short(t)), op,
          {Dense(t, {N}, positive ? 0.01 : -4, 4)}, {}, 8);
    }
    add("unary_math", absl::StrCat("gelu_", Short(t)), "gelu", {Dense(t, {N}, -4, 4)}, {}, 8);
    cancels(t);
    add("unary_math", absl::StrCat("gelu_tanh_", Short(t)), "gelu", {Dense(t, {N}, -4, 4)},
        {{"approximate", std::string("tanh")}}, 8);
    cancels(t);
  }
  // Cheap unary functions.
  for (D t : floats) {
    const std::string s = Short(t);
    for (const char* op : {"neg", "abs", "relu", "round", "reciprocal"}) {
      add("unary_cheap", absl::StrCat(op, "_", s), op, {Dense(t, {N})});
    }
    add("unary_cheap", absl::StrCat("sqrt_", s), "sqrt", {Dense(t, {N}, 0, 4)});
    add("unary_cheap", absl::StrCat("leaky_relu_", s), "leaky_relu", {Dense(t, {N})},
        {{"negative_slope", 0.1}});
  }
  // Integer arithmetic.
  for (D t : ints) {
    const std::string s = Short(t);
    const double lo = ilo(t);
    for (const char* op : {"add", "mul", "maximum"}) {
      add("int", absl::StrCat(op, "_", s), op, {Dense(t, {N}, lo, 100), Dense(t, {N}, lo, 100)});
    }
    for (const char* op : {"floor_divide", "remainder"}) {
      add("int", absl::StrCat(op, "_", s), op, {Dense(t, {N}, lo, 100), Dense(t, {N}, 1, 50)});
    }
  }
  for (D t : {D::kInt8, D::kInt64}) {
    add("int", absl::StrCat("neg_", Short(t)), "neg", {Dense(t, {N}, -100, 100)});
    add("int", absl::StrCat("abs_", Short(t)), "abs", {Dense(t, {N}, -100, 100)});
  }
  // Casts, each direction.
  const std::vector<std::pair<D, D>> casts = {
      {D::kFloat32, D::kFloat16},  {D::kFloat16, D::kFloat32}, {D::kFloat32, D::kBFloat16},
      {D::kBFloat16, D::kFloat32}, {D::kFloat32, D::kFloat64}, {D::kFloat64, D::kFloat32},
      {D::kFloat16, D::kBFloat16}, {D::kFloat32, D::kInt32},   {D::kInt32, D::kFloat32},
      {D::kFloat64, D::kInt64},    {D::kInt64, D::kFloat64},   {D::kUInt8, D::kFloat32},
      {D::kFloat32, D::kUInt8},    {D::kInt8, D::kFloat16},    {D::kBool, D::kFloat32},
      {D::kFloat32, D::kBool},     {D::kInt32, D::kInt64},     {D::kInt64, D::kInt32}};
  for (const auto& [from, to] : casts) {
    add("cast", absl::StrCat("cast_", Short(from), "_to_", Short(to)), "cast",
        {Dense(from, {N}, from == D::kUInt8 || to == D::kUInt8 ? 0 : -100, 100)}, {{"dtype", to}});
  }
  // Ternary ops with broadcast operands and zero-dim scalars.
  const D F32 = D::kFloat32, F16 = D::kFloat16, BF16 = D::kBFloat16;
  add("ternary", "where_f32", "where", {Dense(D::kBool, {N}), Dense(F32, {N}), Dense(F32, {N})});
  add("ternary", "where_f16", "where", {Dense(D::kBool, {N}), Dense(F16, {N}), Dense(F16, {N})});
  add("ternary", "where_f32_cond_col_0dim", "where",
      {Dense(D::kBool, {M, 1}), Dense(F32, {M, M}), Dense(F32, {})});
  add("ternary", "where_f32_cond_row_0dim", "where",
      {Dense(D::kBool, {M}), Dense(F32, {M, M}), Dense(F32, {})});
  add("ternary", "where_f32_0dim_0dim", "where",
      {Dense(D::kBool, {N}), Dense(F32, {}), Dense(F32, {})});
  add("ternary", "addcmul_f32", "addcmul", {Dense(F32, {N}), Dense(F32, {N}), Dense(F32, {N})},
      {{"value", 0.5}});
  cancels(F32);
  add("ternary", "addcmul_f16", "addcmul", {Dense(F16, {N}), Dense(F16, {N}), Dense(F16, {N})},
      {{"value", 0.5}});
  cancels(F16);
  add("ternary", "addcmul_f32_row_0dim", "addcmul",
      {Dense(F32, {M, M}), Dense(F32, {M}), Dense(F32, {})}, {{"value", 0.5}});
  cancels(F32);
  add("ternary", "lerp_f32", "lerp", {Dense(F32, {N}), Dense(F32, {N}), Dense(F32, {N}, 0, 1)});
  cancels(F32);
  add("ternary", "lerp_bf16", "lerp", {Dense(BF16, {N}), Dense(BF16, {N}), Dense(BF16, {N}, 0, 1)});
  cancels(BF16);
  add("ternary", "lerp_f32_0dim_weight", "lerp",
      {Dense(F32, {N}), Dense(F32, {N}), Dense(F32, {}, 0, 1)});
  cancels(F32);
  add("ternary", "clamp_f32_tensor_bounds", "clamp",
      {Dense(F32, {N}), Dense(F32, {N}, -2, 0), Dense(F32, {N}, 0, 2)});
  add("ternary", "clamp_f32_row_bounds", "clamp",
      {Dense(F32, {M, M}), Dense(F32, {M}, -2, 0), Dense(F32, {M}, 0, 2)});
  // Quantized ops (PyTorch's side: the dequantize, compute, requantize composite).
  const AttrMap q = {{"a_scale", 0.05}, {"a_zero_point", int64_t{3}},
                     {"b_scale", 0.1},  {"b_zero_point", int64_t{-2}},
                     {"scale", 0.2},    {"zero_point", int64_t{1}}};
  AttrMap qu = q;
  qu["b_zero_point"] = int64_t{2};
  add("quantized", "quantized_add_i8", "quantized_add",
      {Dense(D::kInt8, {N}, -128, 128), Dense(D::kInt8, {N}, -128, 128)}, q, 0);
  add("quantized", "quantized_mul_i8", "quantized_mul",
      {Dense(D::kInt8, {N}, -128, 128), Dense(D::kInt8, {N}, -128, 128)}, q, 0);
  add("quantized", "quantized_add_u8", "quantized_add",
      {Dense(D::kUInt8, {N}, 0, 256), Dense(D::kUInt8, {N}, 0, 256)}, qu, 0);
  add("quantized", "quantized_sub_u8", "quantized_sub",
      {Dense(D::kUInt8, {N}, 0, 256), Dense(D::kUInt8, {N}, 0, 256)}, qu, 0);
  // Scalars: zero-dim tensors and attributes.
  add("scalar", "add_f32_0dim", "add", {Dense(F32, {N}), Dense(F32, {})});
  add("scalar", "mul_f16_0dim_f32", "mul", {Dense(F16, {N}), Dense(F32, {})});
  add("scalar", "mul_bf16_0dim_f64", "mul", {Dense(BF16, {N}), Dense(D::kFloat64, {})});
  add("scalar", "add_i32_0dim_i64", "add",
      {Dense(D::kInt32, {N}, -100, 100), Dense(D::kInt64, {}, -100, 100)});
  add("scalar", "div_f32_0dim", "div", {Dense(F32, {N}), Dense(F32, {}, 0.5, 2)});
  add("scalar", "add_f32_alpha", "add", {Dense(F32, {N}), Dense(F32, {N})}, {{"alpha", 2.0}});
  add("scalar", "clamp_f32_attrs", "clamp", {Dense(F32, {N})}, {{"min", -1.0}, {"max", 1.0}});
  add("scalar", "clamp_f16_attrs", "clamp", {Dense(F16, {N})}, {{"min", -1.0}, {"max", 1.0}});
  add("scalar", "fill_f32", "fill", {Dense(F32, {N})}, {{"value", 1.5}});
  // Layouts, on float32 add unless named otherwise.
  const D I32 = D::kInt32;
  add("layout", "add_f32_contig", "add", {Dense(F32, {N}), Dense(F32, {N})});
  add("layout", "add_f32_bcast_row", "add", {Dense(F32, {M, M}), Dense(F32, {M})});
  add("layout", "add_f32_bcast_col", "add", {Dense(F32, {M, M}), Dense(F32, {M, 1})});
  add("layout", "add_f32_outer", "add", {Dense(F32, {M, 1}), Dense(F32, {1, M})});
  add("layout", "add_f16_bcast_row", "add", {Dense(F16, {M, M}), Dense(F16, {M})});
  add("layout", "add_bf16_f32_row", "add", {Dense(BF16, {M, M}), Dense(F32, {M})});
  add("layout", "add_i32_bcast_col", "add",
      {Dense(I32, {M, M}, -100, 100), Dense(I32, {M, 1}, -100, 100)});
  add("layout", "add_f32_nchw_channel", "add",
      {Dense(F32, {32, 256, 64, 128}), Dense(F32, {1, 256, 1, 1})});
  add("layout", "add_f32_nhwc_channel", "add", {Dense(F32, {32, 64, 128, 256}), Dense(F32, {256})});
  add("layout", "add_f32_3d_mixed", "add",
      {Dense(F32, {64, 1, 1024}), Dense(F32, {1, 1024, 1024})});
  add("layout", "mul_f64_3d_mixed", "mul",
      {Dense(D::kFloat64, {64, 1024, 1}), Dense(D::kFloat64, {1, 1024, 1024})});
  // One operand permuted, rank 2 to 4 (2^26 elements; ranks 4 to 7 in the group perm).
  struct Perm {
    const char* name;
    DimVector shape;  // the permuted operand's storage shape
    std::vector<int> perm;
  };
  const std::vector<Perm> perms = {
      {"perm2_10", {M, M}, {1, 0}},
      {"perm3_201", {256, 512, 512}, {2, 0, 1}},
      {"perm3_021", {256, 512, 512}, {0, 2, 1}},
      {"perm4_0132", {32, 64, 128, 256}, {0, 1, 3, 2}},
  };
  for (const Perm& p : perms) {
    const In x = Permuted(F32, p.shape, p.perm);
    add("layout", absl::StrCat("add_f32_", p.name), "add", {Dense(F32, x.shape), x});
  }
  {
    const In x = Permuted(F16, {32, 64, 128, 256}, {3, 1, 0, 2});
    add("layout", "add_f16_perm4_3102", "add", {Dense(F16, x.shape), x});
    const In y = Permuted(D::kInt8, {256, 512, 512}, {2, 0, 1});
    add("layout", "add_i8_perm3_201", "add", {Dense(D::kInt8, y.shape, -50, 50), y});
  }
  add("layout", "add_f32_transposed_out", "add", {Dense(F32, {M, M}), Dense(F32, {M, M})});
  cs.back().out_strides = {1, M};
  // Slices, steps, negative strides, misaligned offsets.
  add("layout", "add_f32_step2", "add", {Strided(F32, {N}, {2}, 0), Strided(F32, {N}, {2}, 1)});
  add("layout", "add_f32_step3", "add", {Strided(F32, {N}, {3}, 0), Dense(F32, {N})});
  add("layout", "add_f32_slice_cols", "add",
      {Strided(F32, {M, M}, {M + 2, 1}, 1), Strided(F32, {M, M}, {M + 2, 1}, 1)});
  add("layout", "add_f32_slice_rows_step2", "add",
      {Strided(F32, {M / 2, 2 * M}, {4 * M, 1}, 0), Dense(F32, {M / 2, 2 * M})});
  add("layout", "add_f32_flipped", "add", {Strided(F32, {N}, {-1}, N - 1), Dense(F32, {N})});
  add("layout", "add_f32_flipped_rows", "add",
      {Strided(F32, {M, M}, {-M, 1}, (M - 1) * M), Dense(F32, {M, M})});
  add("layout", "add_f32_offset1", "add", {Strided(F32, {N}, {1}, 1), Strided(F32, {N}, {1}, 1)});
  add("layout", "add_f32_offset1_3", "add", {Strided(F32, {N}, {1}, 1), Strided(F32, {N}, {1}, 3)});
  add("layout", "mul_f16_offset1", "mul", {Strided(F16, {N}, {1}, 1), Dense(F16, {N})});
  // Long math in float16 over views one element off (the row kernel's shifted loads).
  add("layout", "sin_f16_offset1", "sin", {Strided(F16, {N}, {1}, 1, -4, 4)}, {}, 8);
  add("layout", "pow_f16_offset1", "pow", {Strided(F16, {N}, {1}, 1, 0.5, 2), Dense(F16, {N})}, {},
      4);
  add("layout", "add_i8_offset3", "add",
      {Strided(D::kInt8, {N}, {1}, 3, -50, 50), Dense(D::kInt8, {N}, -50, 50)});
  add("layout", "sigmoid_f32_flipped", "sigmoid", {Strided(F32, {N}, {-1}, N - 1)}, {}, 8);
  add("layout", "add_f32_small_4k", "add", {Dense(F32, {4096}), Dense(F32, {4096})});
  add("layout", "add_f32_odd_1000003", "add", {Dense(F32, {1000003}), Dense(F32, {1000003})});
  // Row slices x[:, :cols] + y, y contiguous [M, cols], of each element size: cols keeping
  // every row start 16-byte aligned, and M - 3 (no two rows aligned alike).
  for (D t : {D::kInt8, F16, F32, D::kFloat64}) {
    const int64_t aligned = M - 16 / ItemSize(t);
    for (const auto& [cols, what] : {std::pair<int64_t, const char*>{aligned, "aligned"},
                                     std::pair<int64_t, const char*>{M - 3, "unaligned"}}) {
      const double lo = t == D::kInt8 ? -50 : -2, hi = t == D::kInt8 ? 50 : 2;
      add("rowslice", absl::StrCat("add_", Short(t), "_rows_", what), "add",
          {Strided(t, {M, cols}, {M, 1}, 0, lo, hi), Dense(t, {M, cols}, lo, hi)});
    }
  }
  add("rowslice", "add_f32_rows_offsets_1_2", "add",
      {Strided(F32, {M, M - 3}, {M, 1}, 1), Strided(F32, {M, M - 3}, {M, 1}, 2)});
  add("rowslice", "mul_bf16_f32_rows_unaligned", "mul",
      {Strided(BF16, {M, M - 3}, {M, 1}, 0), Dense(F32, {M, M - 3})});
  // One operand permuted, ranks 4 to 7, at 2^21 and 2^26 elements.
  const std::vector<Perm> deep = {
      {"perm4_3102_2e21", {16, 32, 64, 64}, {3, 1, 0, 2}},
      {"perm5_42031_2e21", {8, 8, 16, 32, 64}, {4, 2, 0, 3, 1}},
      {"perm6_531402_2e21", {4, 8, 8, 8, 16, 32}, {5, 3, 1, 4, 0, 2}},
      {"perm7_6420531_2e21", {4, 4, 4, 8, 8, 16, 32}, {6, 4, 2, 0, 5, 3, 1}},
      {"perm4_3102", {32, 64, 128, 256}, {3, 1, 0, 2}},
      {"perm5_42031", {16, 16, 32, 32, 256}, {4, 2, 0, 3, 1}},
      {"perm6_531402", {8, 8, 16, 16, 16, 256}, {5, 3, 1, 4, 0, 2}},
      {"perm7_6420531", {8, 8, 8, 16, 16, 16, 32}, {6, 4, 2, 0, 5, 3, 1}},
  };
  for (const Perm& p : deep) {
    const In x = Permuted(F32, p.shape, p.perm);
    add("perm", absl::StrCat("add_f32_", p.name), "add", {Dense(F32, x.shape), x});
  }
  // Broadcasts whose dims alternate between the operands (nothing coalesces), ranks 5 to 8.
  add("bcast", "add_f32_bcast5_alternating", "add",
      {Dense(F32, {32, 1, 32, 1, 64}), Dense(F32, {1, 16, 1, 16, 1})});
  add("bcast", "add_f32_bcast6_alternating", "add",
      {Dense(F32, {16, 1, 32, 1, 64, 1}), Dense(F32, {1, 8, 1, 8, 1, 8})});
  add("bcast", "add_f32_bcast7_alternating", "add",
      {Dense(F32, {8, 1, 16, 1, 16, 1, 64}), Dense(F32, {1, 4, 1, 8, 1, 8, 1})});
  add("bcast", "add_f32_bcast8_alternating", "add",
      {Dense(F32, {4, 1, 8, 1, 8, 1, 16, 1}), Dense(F32, {1, 4, 1, 4, 1, 8, 1, 32})});
  // Casts through a transposed input or into a transposed output.
  const std::vector<std::pair<D, D>> transposed_casts = {
      {F32, BF16}, {BF16, F32}, {F32, F16}, {F16, F32}, {F32, D::kFloat64}, {D::kInt32, F32}};
  for (const auto& [from, to] : transposed_casts) {
    add("transcast", absl::StrCat("cast_", Short(from), "t_to_", Short(to)), "cast",
        {Permuted(from, {M, M}, {1, 0})}, {{"dtype", to}});
    add("transcast", absl::StrCat("cast_", Short(from), "_to_", Short(to), "t"), "cast",
        {Dense(from, {M, M})}, {{"dtype", to}});
    cs.back().out_strides = {1, M};
  }
  add("transcast", "add_bf16t_f32", "add", {Permuted(BF16, {M, M}, {1, 0}), Dense(F32, {M, M})});
  return cs;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string JsonDims(const DimVector& d) { return absl::StrCat("[", absl::StrJoin(d, ", "), "]"); }

std::string JsonAttr(const AttrValue& v) {
  if (const auto* d = std::get_if<double>(&v)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", *d);
    return buf;
  }
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&v)) return JsonString(*s);
  if (const auto* t = std::get_if<DType>(&v))
    return absl::StrCat("{\"dtype\": \"", DTypeName(*t), "\"}");
  return "null";
}

// The cases as the PyTorch script reads them.
std::string CasesJson(const std::vector<Case>& cases) {
  std::string js = "[\n";
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    js += absl::StrCat("  {\"name\": ", JsonString(k.name), ", \"op\": ", JsonString(k.op),
                       ", \"attrs\": {");
    bool first = true;
    for (const auto& [name, value] : k.attrs) {
      js += absl::StrCat(first ? "" : ", ", JsonString(name), ": ", JsonAttr(value));
      first = false;
    }
    js += "}, \"inputs\": [";
    for (size_t i = 0; i < k.inputs.size(); ++i) {
      const In& in = k.inputs[i];
      char range[96];
      std::snprintf(range, sizeof range, "\"lo\": %.17g, \"hi\": %.17g", in.lo, in.hi);
      js += absl::StrCat(i ? ", " : "", "{\"dtype\": \"", DTypeName(in.dtype),
                         "\", \"shape\": ", JsonDims(in.shape),
                         ", \"strides\": ", JsonDims(in.strides), ", \"offset\": ", in.offset,
                         ", \"storage\": ", StorageElements(in), ", ", range, "}");
    }
    js += absl::StrCat(
        "], \"out_strides\": ", k.out_strides.empty() ? "null" : JsonDims(k.out_strides), "}",
        c + 1 < cases.size() ? ",\n" : "\n");
  }
  return js + "]\n";
}

// Uniform values of `in`'s range as its dtype, from `seed`: integers in [lo, hi), bool half
// true.
std::vector<std::byte> Values(const In& in, int64_t n, uint64_t seed) {
  std::vector<std::byte> host(static_cast<size_t>(n * ItemSize(in.dtype)));
  VisitDType(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = reinterpret_cast<T*>(host.data());
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      const double u = static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
      if constexpr (std::is_same_v<T, bool>) {
        out[i] = u < 0.5;
      } else if constexpr (std::is_integral_v<T>) {
        out[i] = static_cast<T>(std::floor(in.lo + u * (in.hi - in.lo)));
      } else {
        out[i] = Convert<T>(in.lo + u * (in.hi - in.lo));
      }
    }
  });
  return host;
}

struct Result {
  double ms = 0, copy_ms = 0, torch_ms = -1;
  int64_t bytes = 0;
  std::string error;
};

}  // namespace
}  // namespace tc

ABSL_FLAG(std::string, torch, "", "torch_matrix.py: PyTorch's side (none if empty).");
ABSL_FLAG(int, reps, 30, "Timed repetitions of each case.");
ABSL_FLAG(std::string, only, "", "Only the cases whose name contains this.");
ABSL_FLAG(std::string, group, "", "Only these groups, comma-separated.");
ABSL_FLAG(bool, list, false, "List the cases and stop.");
ABSL_FLAG(std::string, cases_json, "", "Write the cases here as JSON (for torch_matrix.py).");
ABSL_FLAG(std::string, json, "", "Write the results here as JSON.");
ABSL_FLAG(std::string, markdown, "", "Write the table here too.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Every op family and layout class on the GPU, beside PyTorch running the same views.");
  absl::ParseCommandLine(argc, argv);
  using namespace tc;
  const std::string torch_script = absl::GetFlag(FLAGS_torch);
  const std::string only = absl::GetFlag(FLAGS_only);
  const std::string groups = absl::GetFlag(FLAGS_group);
  const std::string json_path = absl::GetFlag(FLAGS_json);
  const std::string md_path = absl::GetFlag(FLAGS_markdown);
  const std::string cases_json = absl::GetFlag(FLAGS_cases_json);
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  const bool list = absl::GetFlag(FLAGS_list);
  std::vector<Case> cases = AllCases();
  std::set<std::string> names;  // results are kept by name
  for (const Case& k : cases) {
    if (!names.insert(k.name).second) {
      std::fprintf(stderr, "two cases are named %s\n", k.name.c_str());
      return 2;
    }
  }
  const std::vector<std::string> wanted_groups = absl::StrSplit(groups, ',', absl::SkipEmpty());
  std::vector<Case> chosen;
  for (Case& k : cases) {
    if (!only.empty() && k.name.find(only) == std::string::npos) continue;
    if (!wanted_groups.empty() &&
        std::find(wanted_groups.begin(), wanted_groups.end(), k.group) == wanted_groups.end()) {
      continue;
    }
    chosen.push_back(std::move(k));
  }
  if (list) {
    for (const Case& k : chosen) std::printf("%-12s %s\n", k.group.c_str(), k.name.c_str());
    std::printf("%zu cases\n", chosen.size());
    return 0;
  }
  if (!cases_json.empty()) {
    std::ofstream(cases_json) << CasesJson(chosen);
    return 0;
  }
  if (chosen.empty()) {
    std::fprintf(stderr, "no case matches\n");
    return 2;
  }
  cudaDeviceProp prop{};
  if (!bench::FirstDevice(&prop)) return 1;

  std::map<std::string, Result> results;
  // PyTorch first, with the device to itself.
  std::string torch_version;
  if (!torch_script.empty()) {
    const std::string spec = "/tmp/tc_matrix_cases.json";
    std::ofstream(spec) << CasesJson(chosen);
    std::istringstream lines(bench::Capture(
        absl::StrCat("python3 ", torch_script, " --cases=", spec, " --reps=", reps, " 2>&1")));
    std::string line;
    int parsed = 0;
    while (std::getline(lines, line)) {
      char name[160];
      double ms;
      if (std::sscanf(line.c_str(), "case %159s %lf", name, &ms) == 2) {
        results[name].torch_ms = ms;
        ++parsed;
      } else if (line.rfind("torch ", 0) == 0) {
        torch_version = line.substr(6);
      } else if (!line.empty()) {
        std::fprintf(stderr, "torch: %s\n", line.c_str());
      }
    }
    if (parsed == 0) std::fprintf(stderr, "no figures from %s\n", torch_script.c_str());
  }

  const cuda::LaunchEnv env = bench::MakeLaunchEnv(prop);
  cudaStream_t stream = env.stream;
  int* dev_error = env.error;
  bench::Timer timer(stream, reps, int64_t{2} << 30);
  const double copy_gbs = 2.0 * (1 << 30) / timer.CopyMs(int64_t{2} << 30) / 1e6;
  std::printf("%s: copy 1 GiB D2D %.0f GB/s (read+write); %zu cases\n", prop.name, copy_gbs,
              chosen.size());

  CpuBackend cpu(0);
  int bad = 0;
  // Inputs are kept for the cases after, keyed by what they hold.
  std::map<std::string, DevBuf> pool;
  int64_t pool_bytes = 0;
  auto input = [&](const In& in, int k) -> DevBuf {
    const int64_t n = StorageElements(in);
    const std::string key =
        absl::StrCat(DTypeName(in.dtype), "/", n, "/", in.lo, "/", in.hi, "/", k);
    if (auto it = pool.find(key); it != pool.end()) return it->second;
    const int64_t bytes = n * ItemSize(in.dtype);
    if (pool_bytes + bytes > (int64_t{24} << 30)) {
      for (auto& [_, b] : pool) bench::Free(b);
      pool.clear();
      pool_bytes = 0;
    }
    const std::vector<std::byte> host = Values(in, n, 1000 + static_cast<uint64_t>(k));
    DevBuf b = bench::Upload(host.data(), bytes);
    pool[key] = b;
    pool_bytes += bytes;
    return b;
  };
  for (const Case& k : chosen) {
    Result& r = results[k.name];
    std::vector<TensorView> views;
    for (size_t i = 0; i < k.inputs.size(); ++i) {
      const In& in = k.inputs[i];
      const DevBuf b = input(in, static_cast<int>(i));
      views.push_back(TensorView{in.dtype, in.shape, in.strides, in.offset, b.p, b.bytes});
    }
    OutputOptions output;
    if (!k.out_strides.empty()) output.strides = k.out_strides;
    auto op = PrepareOp(k.op, views, k.attrs, output);
    if (!op.ok()) {
      r.error = op.status().ToString();
      std::fprintf(stderr, "%s: %s\n", k.name.c_str(), r.error.c_str());
      ++bad;
      continue;
    }
    DevBuf out = bench::Alloc(op->plan.out_storage_bytes);
    absl::Status status;
    r.ms = timer.MedianMs([&] {
      auto p = PrepareOp(k.op, views, k.attrs, output);
      if (!p.ok()) {
        status = p.status();
        return;
      }
      char* base[kMaxOperands] = {};
      OperandBases(p->plan, out.p, views, base);
      status.Update(cuda::LaunchOp(*p, base, env));
    });
    TC_CHECK_CUDA(cudaStreamSynchronize(stream));
    if (!status.ok()) {
      r.error = status.ToString();
    } else {
      r.error = bench::CheckAgainstCpu(cpu, *op, views, out.p, k.ulps, k.abs_tol);
    }
    if (!r.error.empty()) {
      std::fprintf(stderr, "%s: %s\n", k.name.c_str(), r.error.c_str());
      ++bad;
    }
    bench::Free(out);
    r.bytes = op->plan.numel * ItemSize(op->plan.out_dtype);
    for (const In& in : k.inputs) r.bytes += Numel(in.shape) * ItemSize(in.dtype);
    r.copy_ms = timer.CopyMs(r.bytes);
  }
  int host_error = 0;
  TC_CHECK_CUDA(cudaMemcpy(&host_error, dev_error, sizeof(int), cudaMemcpyDeviceToHost));
  if (host_error != 0) std::fprintf(stderr, "note: a kernel raised its error flag\n");

  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::ostringstream md;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s, %s, PyTorch %s; copy 1 GiB D2D %.0f GB/s. Median of %d calls per case. "
                "%% same-size copy: a copy moving the case's bytes (output and input views), "
                "its time over ours; vs torch: torch ms over our ms.\n\n",
                date, prop.name, torch_version.empty() ? "not run" : torch_version.c_str(),
                copy_gbs, reps);
  md << buf;
  md << "| group | case | ms | GB/s | % same-size copy | torch ms | vs torch |\n"
     << "|---|---|---:|---:|---:|---:|---:|\n";
  int below_torch = 0, with_torch = 0;
  for (const Case& k : chosen) {
    const Result& r = results[k.name];
    if (r.ms <= 0) continue;
    const double gbs = static_cast<double>(r.bytes) / r.ms / 1e6;
    if (r.torch_ms > 0) {
      ++with_torch;
      if (r.torch_ms < r.ms) ++below_torch;
      std::snprintf(buf, sizeof buf, "| %s | %s | %.4f | %.0f | %.1f | %.4f | %.2fx |\n",
                    k.group.c_str(), k.name.c_str(), r.ms, gbs, 100.0 * r.copy_ms / r.ms,
                    r.torch_ms, r.torch_ms / r.ms);
    } else {
      std::snprintf(buf, sizeof buf, "| %s | %s | %.4f | %.0f | %.1f | - | - |\n", k.group.c_str(),
                    k.name.c_str(), r.ms, gbs, 100.0 * r.copy_ms / r.ms);
    }
    md << buf;
  }
  std::snprintf(buf, sizeof buf, "\n%d of %d cases with PyTorch figures are below 1.0x.\n",
                below_torch, with_torch);
  md << buf;
  std::printf("%s", md.str().c_str());
  if (!md_path.empty()) std::ofstream(md_path) << md.str();
  if (!json_path.empty()) {
    std::ofstream js(json_path);
    js << "{\"date\": \"" << date << "\", \"device\": \"" << prop.name << "\", \"torch\": \""
       << torch_version << "\", \"copy_gbs\": " << copy_gbs << ", \"reps\": " << reps
       << ", \"cases\": {";
    bool first = true;
    for (const Case& k : chosen) {
      const Result& r = results[k.name];
      std::snprintf(buf, sizeof buf,
                    "%s\n  \"%s\": {\"group\": \"%s\", \"ms\": %.5f, \"bytes\": %lld, "
                    "\"same_size_copy_ms\": %.5f, \"torch_ms\": %.5f}",
                    first ? "" : ",", k.name.c_str(), k.group.c_str(), r.ms,
                    static_cast<long long>(r.bytes), r.copy_ms, r.torch_ms);
      js << buf;
      first = false;
    }
    js << "\n}}\n";
  }
  if (bad > 0) {
    std::fprintf(stderr, "%d cases failed or differ from the CPU backend\n", bad);
    return 1;
  }
  std::printf("every case matched the CPU backend\n");
  return 0;
}
