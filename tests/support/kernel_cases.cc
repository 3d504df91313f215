#include "tests/support/kernel_cases.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tests/support/reference.h"

namespace tc::testing {
namespace {

// A tensor over its own storage of `storage_elems` elements, every one set by `fill`.
OwnedTensor Tensor(DType t, DimVector shape, DimVector strides, int64_t offset,
                   int64_t storage_elems, std::mt19937_64& rng) {
  OwnedTensor o;
  o.storage.resize(static_cast<size_t>(storage_elems * ItemSize(t)));
  for (int64_t i = 0; i < storage_elems; ++i) {
    ref::Value v;
    if (t == DType::kBool) {
      v.is_int = true;
      v.i = static_cast<int64_t>(rng() % 2);
    } else if (IsFloating(t)) {
      v.f = static_cast<double>(static_cast<int64_t>(rng() % 2001) - 1000) /
            8;  // exact in every float type
    } else {
      v.is_int = true;
      v.i = static_cast<int64_t>(rng() % 200) - 100;
    }
    ref::Write(t, v, o.storage.data() + i * ItemSize(t));
  }
  o.view = TensorView{t,      std::move(shape), std::move(strides),
                      offset, o.Data(),         static_cast<int64_t>(o.storage.size())};
  return o;
}

OwnedTensor Dense(DType t, DimVector shape, std::mt19937_64& rng, int64_t offset = 0) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  DimVector strides = ContiguousStrides(shape);
  return Tensor(t, std::move(shape), std::move(strides), offset, n + offset, rng);
}

// [rows, cols] seen through the transpose of a dense [cols, rows].
OwnedTensor Transposed(DType t, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  return Tensor(t, {rows, cols}, {1, rows}, 0, rows * cols, rng);
}

}  // namespace

std::vector<TensorView> KernelCase::Views() const {
  std::vector<TensorView> v;
  for (const OwnedTensor& t : inputs) v.push_back(t.view);
  return v;
}

absl::StatusOr<PreparedOp> KernelCase::Prepare(TileRule tiles) const {
  OutputOptions output;
  output.strides = out_strides;
  const std::vector<TensorView> views = Views();
  return PrepareOp(op, views, {}, output, tiles);
}

std::vector<KernelCase> KernelCases(std::mt19937_64& rng) {
  constexpr bool kPermuted = true, kInOrder = false;
  const DType f32 = DType::kFloat32, f16 = DType::kFloat16;
  std::vector<KernelCase> c;
  const auto add = [&c](std::string name, std::string op, std::vector<OwnedTensor> in,
                        bool permuted, Kernel kernel, DimVector out_strides = {}) {
    c.push_back(KernelCase{std::move(name), std::move(op), std::move(in), std::move(out_strides),
                           permuted, kernel});
  };
  add("contiguous", "add", {Dense(f32, {1000}, rng), Dense(f32, {1000}, rng)}, kInOrder,
      Kernel::kRows);
  add("contiguous, a length no vector divides", "add",
      {Dense(f32, {1001}, rng), Dense(f32, {1001}, rng)}, kInOrder, Kernel::kCastRows);
  add("contiguous comparison, bool output", "eq",
      {Dense(f32, {4096}, rng), Dense(f32, {4096}, rng)}, kInOrder, Kernel::kRows);
  add("contiguous, mixed dtypes", "add", {Dense(f16, {1024}, rng), Dense(f32, {1024}, rng)},
      kInOrder, Kernel::kCastRows);
  add("where with a bool condition", "where",
      {Dense(DType::kBool, {512}, rng), Dense(f32, {512}, rng), Dense(f32, {512}, rng)}, kInOrder,
      Kernel::kCastRows);
  add("0-dim scalar", "add", {Dense(f32, {1024}, rng), Dense(f32, {}, rng)}, kInOrder,
      Kernel::kRows);
  add("row broadcast", "add", {Dense(f32, {64, 128}, rng), Dense(f32, {128}, rng)}, kInOrder,
      Kernel::kRows);
  add("row broadcast, rows of odd length", "add", {Dense(f32, {64, 5}, rng), Dense(f32, {5}, rng)},
      kInOrder, Kernel::kCastRows);
  add("column broadcast", "add", {Dense(f32, {64, 128}, rng), Dense(f32, {64, 1}, rng)}, kInOrder,
      Kernel::kRows);
  add("transposed input", "add", {Dense(f32, {96, 80}, rng), Transposed(f32, 96, 80, rng)},
      kPermuted, Kernel::kTiles);
  add("transposed output", "add", {Dense(f32, {67, 131}, rng), Dense(f32, {67, 131}, rng)},
      kPermuted, Kernel::kTiles, {1, 67});
  add("channels-first into channels-last, batched", "add",
      {Tensor(f32, {3, 45, 70}, {45 * 70, 1, 45}, 0, 3 * 45 * 70, rng),
       Dense(f32, {3, 45, 70}, rng)},
      kPermuted, Kernel::kTiles);
  add("transposed input, mixed dtypes", "add",
      {Dense(f32, {96, 80}, rng), Transposed(f16, 96, 80, rng)}, kPermuted, Kernel::kTiles);
  add("transposed input, mixed dtypes, computed in float16", "add",
      {Dense(f16, {96, 80}, rng), Transposed(DType::kInt8, 96, 80, rng)}, kPermuted,
      Kernel::kCastRows);
  add("transposed input, a dim under a tile", "add",
      {Dense(f32, {8, 200}, rng), Transposed(f32, 8, 200, rng)}, kPermuted, Kernel::kCastRows);
  add("three transposed inputs (two tiles at most)", "addcmul",
      {Transposed(DType::kInt32, 64, 48, rng), Transposed(DType::kInt32, 64, 48, rng),
       Transposed(DType::kInt32, 64, 48, rng)},
      kPermuted, Kernel::kCastRows);
  add("rank 4, permuted", "add",
      {Dense(f32, {4, 5, 6, 7}, rng),
       Tensor(f32, {4, 5, 6, 7}, {1, 4 * 6 * 7, 4, 4 * 6}, 0, 4 * 5 * 6 * 7, rng)},
      kPermuted, Kernel::kGeneral);
  // A [5, 17, 3, 4, 18] storage permuted (4, 2, 0, 3, 1): tiles over the output's fastest dim
  // and the input's (moved to plan dim 1), three batch dims.
  add("rank 5, permuted, tile dims at least 16", "add",
      {Dense(f32, {18, 3, 5, 4, 17}, rng),
       Tensor(f32, {18, 3, 5, 4, 17}, {1, 72, 3672, 18, 216}, 0, 18360, rng)},
      kPermuted, Kernel::kTiles);
  // A [3, 4, 5, 5, 2, 3, 16] storage permuted (6, 4, 2, 0, 5, 3, 1): the output dense along
  // 4 elements only; tile dim 0 fuses them with the next 5, tile dim 1 the input's 16 with
  // the 3 its run goes on in (Plan::fused), partial tiles along both.
  add("rank 7, permuted, fused tile dims", "add",
      {Dense(f32, {16, 2, 5, 3, 3, 5, 4}, rng),
       Tensor(f32, {16, 2, 5, 3, 3, 5, 4}, {1, 48, 480, 9600, 16, 96, 2400}, 0, 28800, rng)},
      kPermuted, Kernel::kTiles);
  add("every other element", "add", {Tensor(f32, {500}, {2}, 1, 1001, rng), Dense(f32, {500}, rng)},
      kInOrder, Kernel::kCastRows);
  add("rank 4, stepped in every dim", "add",
      {Tensor(f32, {4, 5, 6, 7}, {2 * 10 * 12 * 14, 2 * 12 * 14, 2 * 14, 2}, 0, 8 * 10 * 12 * 14,
              rng),
       Dense(f32, {4, 5, 6, 7}, rng)},
      kInOrder, Kernel::kGeneral);
  // Broadcasts whose dims alternate between the operands: nothing coalesces; rows along the
  // last dim, their starts over every other dim, for binary ops whose rows allow kRows.
  add("rank 5, alternating broadcast", "add",
      {Dense(f32, {6, 1, 5, 1, 12}, rng), Dense(f32, {1, 3, 1, 7, 1}, rng)}, kInOrder,
      Kernel::kRows);
  add("rank 8, alternating broadcast, rows of odd length", "add",
      {Dense(f32, {2, 1, 3, 1, 2, 1, 3, 1}, rng), Dense(f32, {1, 3, 1, 2, 1, 2, 1, 9}, rng)},
      kInOrder, Kernel::kGeneral);
  add("rank 6, alternating broadcast, mixed dtypes, misaligned", "add",
      {Dense(f16, {1, 2, 1, 3, 1, 8}, rng, 3), Dense(f32, {3, 1, 4, 1, 5, 1}, rng)}, kInOrder,
      Kernel::kGeneral);
  add("rank 6, alternating broadcast, float16", "add",
      {Dense(f16, {1, 3, 1, 4, 1, 16}, rng), Dense(f16, {2, 1, 3, 1, 5, 1}, rng)}, kInOrder,
      Kernel::kRows);
  add("rank 4, alternating broadcast, bool result", "eq",
      {Dense(f32, {5, 1, 7, 1}, rng), Dense(f32, {1, 3, 1, 12}, rng)}, kInOrder, Kernel::kRows);
  add("rank 5, alternating broadcast, an outer dim reversed", "add",
      {Tensor(f32, {4, 1, 3, 1, 8}, {-24, 24, 8, 8, 1}, 72, 96, rng),
       Dense(f32, {1, 5, 1, 6, 1}, rng)},
      kInOrder, Kernel::kRows);
  add("rank 5, where, alternating broadcast", "where",
      {Dense(DType::kBool, {4, 1, 3, 1, 8}, rng), Dense(f32, {1, 5, 1, 6, 1}, rng),
       Dense(f32, {}, rng)},
      kInOrder, Kernel::kGeneral);
  add("rank 5, alternating broadcast, rows of three", "add",
      {Dense(f32, {6, 1, 5, 1, 3}, rng), Dense(f32, {1, 3, 1, 7, 1}, rng)}, kInOrder,
      Kernel::kGeneral);
  return c;
}

std::string CheckKernelCase(const KernelCase& c, const PreparedOp& op,
                            const std::vector<std::byte>& got) {
  const Plan& plan = op.plan;
  const std::vector<TensorView> in = c.Views();
  std::string problem;
  ForEachIndex(plan.out_shape, [&](const std::vector<int64_t>& idx) {
    if (!problem.empty()) return;
    std::vector<ref::Value> x;
    for (const TensorView& v : in) {
      ref::Value e = ref::Read(v.dtype, ElementAt(v, Project(v, idx)));
      // Half-precision inputs of a float32 computation widen exactly.
      x.push_back(e);
    }
    ref::Value want;
    if (c.op == "add") {
      want.f = ref::RoundToFloat(plan.out_dtype, x[0].AsDouble() + x[1].AsDouble());
    } else if (c.op == "eq") {
      want.is_int = true;
      want.i = x[0].AsDouble() == x[1].AsDouble();
    } else if (c.op == "where") {
      want = x[0].i != 0 ? x[1] : x[2];
    } else if (c.op == "addcmul") {  // int32: a + 1 * b * c, wrapped
      want.is_int = true;
      want.i = ref::Wrap(plan.out_dtype,
                         static_cast<__int128>(x[0].i) + static_cast<__int128>(x[1].i) * x[2].i);
    } else {
      problem = absl::StrCat("no independent result for op ", c.op);
      return;
    }
    int64_t at = 0;
    for (size_t d = 0; d < idx.size(); ++d) at += idx[d] * plan.out_strides[d];
    std::vector<char> bytes(static_cast<size_t>(ItemSize(plan.out_dtype)));
    ref::Write(plan.out_dtype, want, bytes.data());
    if (std::memcmp(bytes.data(), got.data() + at * ItemSize(plan.out_dtype), bytes.size()) != 0) {
      const ref::Value g = ref::Read(plan.out_dtype, reinterpret_cast<const char*>(got.data()) +
                                                         at * ItemSize(plan.out_dtype));
      problem = absl::StrCat("element ", at, ": got ", g.is_int ? g.i : g.f, ", want ",
                             want.is_int ? want.i : want.f);
    }
  });
  return problem;
}

}  // namespace tc::testing
