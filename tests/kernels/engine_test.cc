// Views, the planner and request checking, without a backend.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <algorithm>
#include <vector>

#include "gtest/gtest.h"
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/cpu/half_rows.h"
#include "kernels/engine.h"
#include "kernels/expr/program.h"
#include "kernels/planner.h"
#include "kernels/tensor_view.h"
#include "tests/support/kernel_cases.h"

namespace tc {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TensorView F32(DimVector shape, DimVector strides, int64_t offset, int64_t storage_elems) {
  static std::vector<float> storage(1 << 16);
  return TensorView{DType::kFloat32,
                    std::move(shape),
                    std::move(strides),
                    offset,
                    reinterpret_cast<const std::byte*>(storage.data()),
                    storage_elems * 4};
}

TensorView Contiguous(DimVector shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  DimVector strides = ContiguousStrides(shape);
  return F32(std::move(shape), std::move(strides), 0, n);
}

void ExpectInvalid(const absl::Status& s, absl::string_view fragment) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(fragment), absl::string_view::npos)
      << "message '" << s.message() << "' lacks '" << fragment << "'";
}

TEST(ValidateView, AcceptsExactFitsAndViews) {
  EXPECT_TRUE(ValidateView(F32({2, 3}, {3, 1}, 0, 6), "t").ok());
  EXPECT_TRUE(ValidateView(F32({3, 2}, {1, 3}, 0, 6), "t").ok());        // transposed
  EXPECT_TRUE(ValidateView(F32({4}, {-1}, 3, 4), "t").ok());             // reversed
  EXPECT_TRUE(ValidateView(F32({1000, 1000}, {0, 0}, 2, 3), "t").ok());  // broadcast
  EXPECT_TRUE(ValidateView(F32({}, {}, 5, 6), "t").ok());                // scalar at offset
  EXPECT_TRUE(ValidateView(F32({0, 5}, {5, 1}, 100, 0), "t").ok());      // empty reaches nothing
}

TEST(ValidateView, RejectsWhatReachesOutside) {
  ExpectInvalid(ValidateView(F32({2, 3}, {3, 1}, 0, 5), "input 0"), "input 0");
  ExpectInvalid(ValidateView(F32({2, 3}, {3, 1}, 1, 6), "t"), "reach elements 1..6");
  ExpectInvalid(ValidateView(F32({4}, {-1}, 2, 4), "t"), "reach elements -1..2");
  ExpectInvalid(ValidateView(F32({}, {}, 6, 6), "t"), "storage holds 6");
  ExpectInvalid(ValidateView(F32({2}, {1}, -1, 6), "t"), "offset -1 is negative");
}

TEST(ValidateView, RejectsMalformedMetadata) {
  ExpectInvalid(ValidateView(F32({2, -3}, {1, 1}, 0, 6), "t"), "negative");
  ExpectInvalid(ValidateView(F32({2, 3}, {1}, 0, 6), "t"), "1 strides given for rank 2");
  ExpectInvalid(ValidateView(F32(DimVector(9, 1), DimVector(9, 1), 0, 6), "t"),
                "exceeds the limit");
  TensorView odd = F32({1}, {1}, 0, 1);
  odd.storage_bytes = 6;
  ExpectInvalid(ValidateView(odd, "t"), "not a whole number of float32");
}

TEST(ValidateView, OverflowIsCaughtNotWrapped) {
  ExpectInvalid(ValidateView(F32({1 << 30, 1 << 30, 1 << 30}, {0, 0, 0}, 0, 1), "t"),
                "more than 2^63");
  ExpectInvalid(ValidateView(F32({4}, {kMax / 2}, 0, 8), "t"), "overflow");
  ExpectInvalid(ValidateView(F32({3}, {std::numeric_limits<int64_t>::min()}, 0, 8), "t"),
                "overflow");
  ExpectInvalid(ValidateView(F32({2}, {1}, kMax, 8), "t"), "overflow");
  // A zero dim makes the view empty even when the other dims would overflow.
  EXPECT_TRUE(ValidateView(F32({0, kMax, kMax}, {1, 1, 1}, 0, 0), "t").ok());
}

TEST(Planner, EmptyOutputIgnoresWildStridesAndOffsets) {
  // Nothing is reachable, so nothing about strides or offset may be trusted or multiplied.
  const TensorView in[] = {F32({0, 2}, {kMax, kMax}, kMax, 0), Contiguous({2})};
  auto p = PlanElementwise(in, DType::kFloat32, DType::kFloat32);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->numel, 0);
  EXPECT_EQ(p->offsets[1], 0);
}

TEST(Broadcast, NumPyRules) {
  DimVector a{8, 1, 6, 1}, b{7, 1, 5}, c{};
  const DimVector* ab[] = {&a, &b};
  EXPECT_EQ(*BroadcastShapes(ab), (DimVector{8, 7, 6, 5}));
  const DimVector* ac[] = {&a, &c};
  EXPECT_EQ(*BroadcastShapes(ac), a);
  DimVector d{2, 3}, e{4, 3};
  const DimVector* de[] = {&d, &e};
  ExpectInvalid(BroadcastShapes(de).status(), "dim -2 is 2 in one and 4 in another");
  DimVector z{0}, one{1}, two{2};
  const DimVector* zo[] = {&z, &one};
  EXPECT_EQ(*BroadcastShapes(zo), (DimVector{0}));
  const DimVector* zt[] = {&z, &two};
  EXPECT_FALSE(BroadcastShapes(zt).ok());
}

TEST(Planner, ContiguousCoalescesToOneDim) {
  const TensorView in[] = {Contiguous({4, 5, 6}), Contiguous({4, 5, 6})};
  auto p = PlanElementwise(in, DType::kFloat32, DType::kFloat32);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->ndim, 1);
  EXPECT_EQ(p->sizes[0], 120);
  EXPECT_EQ(p->out_storage_bytes, 480);
}

TEST(Planner, ScalarBroadcast) {
  const TensorView in[] = {Contiguous({4, 5}), Contiguous({})};
  auto p = PlanElementwise(in, DType::kFloat32, DType::kFloat32);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ndim, 1);
  EXPECT_EQ(p->strides[2][0], 0);
}

TEST(Planner, RowBroadcastKeepsTwoDims) {
  const TensorView in[] = {Contiguous({4, 5}), Contiguous({5})};
  auto p = PlanElementwise(in, DType::kFloat32, DType::kFloat32);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->ndim, 2);
  EXPECT_EQ(p->sizes[0], 5);  // fastest dim first
  EXPECT_EQ(p->sizes[1], 4);
  EXPECT_EQ(p->strides[0][0], 4);
  EXPECT_EQ(p->strides[0][1], 20);
  EXPECT_EQ(p->strides[2][0], 4);
  EXPECT_EQ(p->strides[2][1], 0);
}

TEST(Planner, SizeOneDimsDropAndReversedInputKeepsItsOffset) {
  // [3,1,4] reversed along the last dim, against a contiguous [3,1,4].
  const TensorView in[] = {Contiguous({3, 1, 4}), F32({3, 1, 4}, {4, 4, -1}, 3, 12)};
  auto p = PlanElementwise(in, DType::kFloat32, DType::kFloat32);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->ndim, 2);
  EXPECT_EQ(p->strides[2][0], -4);
  EXPECT_EQ(p->offsets[2], 12);
}

TEST(Planner, EmptyAndRankZero) {
  const TensorView scalars[] = {Contiguous({}), Contiguous({})};
  auto p = PlanElementwise(scalars, DType::kFloat32, DType::kFloat32);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->numel, 1);
  const TensorView empty[] = {Contiguous({0, 3}), Contiguous({3})};
  auto q = PlanElementwise(empty, DType::kFloat32, DType::kFloat32);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->numel, 0);
}

TEST(Planner, BroadcastOutputThatOverflowsIsRejected) {
  const TensorView in[] = {F32({1 << 30, 1, 1}, {0, 0, 0}, 0, 1),
                           F32({1, 1 << 30, 1 << 30}, {0, 0, 0}, 0, 1)};
  ExpectInvalid(PlanElementwise(in, DType::kFloat32, DType::kFloat32).status(), "2^63");
}

TEST(Promotion, ResultTypeFollowsPyTorch) {
  auto view = [](DType t, DimVector shape) {
    TensorView v = Contiguous(shape);
    v.dtype = t;
    return v;
  };
  using D = DType;
  struct Case {
    std::vector<TensorView> in;
    DType want;
  };
  const Case cases[] = {
      {{view(D::kUInt8, {2}), view(D::kInt8, {2})}, D::kInt16},
      {{view(D::kInt32, {2}), view(D::kFloat64, {})}, D::kFloat64},  // zero-dim of higher category
      {{view(D::kInt8, {2}), view(D::kInt64, {})}, D::kInt8},        // same category: no raise
      {{view(D::kFloat16, {2}), view(D::kFloat32, {})}, D::kFloat16},
      {{view(D::kFloat16, {2}), view(D::kBFloat16, {2})}, D::kFloat32},
      {{view(D::kBool, {2}), view(D::kInt32, {})}, D::kInt32},
      {{view(D::kInt32, {}), view(D::kFloat16, {})}, D::kFloat16},
      {{view(D::kBool, {2}), view(D::kBool, {2})}, D::kBool},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ResultType(c.in), c.want)
        << DTypeName(c.in[0].dtype) << " " << DTypeName(c.in[1].dtype);
  }
  EXPECT_TRUE(CanCast(D::kInt32, D::kFloat32));
  EXPECT_TRUE(CanCast(D::kBool, D::kUInt8));
  EXPECT_FALSE(CanCast(D::kFloat32, D::kInt64));
  EXPECT_FALSE(CanCast(D::kInt8, D::kBool));
}

// Operand op's reach in bytes from a piece's first element.
int64_t Reach(const IterationDims& dims, const IndexPiece& piece, const int64_t* item, int op) {
  int64_t reach = item[op];
  for (int d = 0; d < dims.ndim; ++d) reach += std::abs(dims.strides[op][d]) * (piece.sizes[d] - 1);
  return reach;
}

TEST(Planner, SplitForIndexingCoversEveryElementOnce) {
  // A [3000, 1000000] float32 output: 12 GB of offsets, far past 2^31.
  const TensorView in[] = {F32({3000, 1}, {1, 1}, 0, 3000), F32({1, 1000000}, {1, 1}, 0, 1000000)};
  // (Views need no real storage for planning beyond what ValidateView checks.)
  auto p = PlanElementwise(in, DType::kFloat32, DType::kFloat32);
  ASSERT_TRUE(p.ok()) << p.status();
  int64_t item[kMaxOperands];
  const IterationDims dims = DimsOf(*p, item);
  const auto pieces = SplitForIndexing(dims, p->numel, item);
  ASSERT_GT(pieces.size(), 1u);
  int64_t total = 0;
  std::vector<int64_t> out_offsets;
  for (const IndexPiece& q : pieces) {
    total += q.numel;
    for (int op = 0; op < dims.num_operands; ++op) EXPECT_LE(Reach(dims, q, item, op), INT32_MAX);
    out_offsets.push_back(q.offsets[0]);
  }
  EXPECT_EQ(total, p->numel);
  std::sort(out_offsets.begin(), out_offsets.end());
  EXPECT_EQ(std::adjacent_find(out_offsets.begin(), out_offsets.end()), out_offsets.end());
  EXPECT_EQ(SplitForIndexing(dims, p->numel, item, INT64_MAX).size(), 1u);

  // Element by element, on a space small enough to walk: a [37, 53, 3] output over a
  // transposed input and a reversed one, split to 200 bytes of reach.
  IterationDims small;
  small.ndim = 3;
  small.num_operands = 3;
  const int64_t sizes[3] = {37, 53, 3}, small_item[3] = {4, 8, 2};
  std::copy(sizes, sizes + 3, small.sizes);
  const int64_t strides[3][3] = {{4, 4 * 37, 4 * 37 * 53}, {8 * 53, 8, 8 * 37 * 53}, {-2, -74, 0}};
  for (int op = 0; op < 3; ++op) std::copy(strides[op], strides[op] + 3, small.strides[op]);
  const int64_t numel = 37 * 53 * 3;
  const auto parts = SplitForIndexing(small, numel, small_item, 200);
  ASSERT_GT(parts.size(), 10u);
  std::vector<int> seen(static_cast<size_t>(numel));
  for (const IndexPiece& q : parts) {
    for (int op = 0; op < 3; ++op) EXPECT_LE(Reach(small, q, small_item, op), 200);
    int64_t count = 0;
    for (int64_t i2 = 0; i2 < q.sizes[2]; ++i2) {
      for (int64_t i1 = 0; i1 < q.sizes[1]; ++i1) {
        for (int64_t i0 = 0; i0 < q.sizes[0]; ++i0) {
          const int64_t at = q.offsets[0] + i0 * 4 + i1 * 4 * 37 + i2 * 4 * 37 * 53;
          // Every operand's element is where the output's says: the same indices.
          const int64_t e = at / 4, j0 = e % 37, j1 = e / 37 % 53, j2 = e / (37 * 53);
          EXPECT_EQ(q.offsets[1] + i0 * strides[1][0] + i1 * strides[1][1] + i2 * strides[1][2],
                    j0 * strides[1][0] + j1 * strides[1][1] + j2 * strides[1][2]);
          EXPECT_EQ(q.offsets[2] + i0 * strides[2][0] + i1 * strides[2][1],
                    j0 * strides[2][0] + j1 * strides[2][1]);
          ++seen[static_cast<size_t>(e)];
          ++count;
        }
      }
    }
    EXPECT_EQ(count, q.numel);
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), numel);
}

TEST(PrepareOp, ChecksOpArityDtypeAndAttributes) {
  const TensorView two[] = {Contiguous({2}), Contiguous({2})};
  ExpectInvalid(PrepareOp("nope", two, {}).status(), "unknown op 'nope'");
  const TensorView one[] = {Contiguous({2})};
  ExpectInvalid(PrepareOp("add", one, {}).status(), "takes 2 inputs, got 1");
  ExpectInvalid(PrepareOp("clamp", two, {}).status(), "op 'clamp' takes 1 or 3 inputs, got 2");
  const TensorView three[] = {Contiguous({2}), Contiguous({2}), Contiguous({2})};
  EXPECT_TRUE(PrepareOp("clamp", three, {}).ok());
  ExpectInvalid(PrepareOp("add", two, {{"beta", 1.0}}).status(), "no attribute 'beta'");
  ExpectInvalid(PrepareOp("add", two, {{"alpha", std::string("x")}}).status(),
                "must be of type float");
  EXPECT_TRUE(PrepareOp("add", two, {{"alpha", int64_t{2}}}).ok());  // int where float is fine
  EXPECT_TRUE(PrepareOp("add", two, {{"alpha", true}}).ok());        // and bool, as PyTorch's
  TensorView flags = Contiguous({2});
  flags.dtype = DType::kBool;
  const TensorView bools[] = {flags, flags};
  EXPECT_TRUE(PrepareOp("add", bools, {{"alpha", true}}).ok());
  TensorView i32 = Contiguous({2});
  i32.dtype = DType::kInt32;
  const TensorView ints[] = {i32, i32};
  ExpectInvalid(PrepareOp("add", ints, {{"alpha", 0.5}}).status(), "whole number");
  const TensorView floats_and_ints[] = {Contiguous({2}), i32};
  ExpectInvalid(PrepareOp("bitwise_and", floats_and_ints, {}).status(),
                "does not accept dtype float32");
  const TensorView bad_view[] = {Contiguous({2}), F32({3}, {1}, 0, 2)};
  ExpectInvalid(PrepareOp("add", bad_view, {}).status(), "input 1");
}

}  // namespace
}  // namespace tc

namespace tc {
namespace {

// The F16C row conversions (where the CPU has them) against the portable scalar ones.
TEST(HalfRows, MatchScalarConversionForEveryHalfAndManyFloats) {
  std::vector<uint16_t> halves(65536);
  for (uint32_t i = 0; i < 65536; ++i) halves[i] = static_cast<uint16_t>(i);
  std::vector<float> widened(65536);
  cpu::HalfToFloatRow(halves.data(), widened.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    const float want = Half::ToFloat(halves[i]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(widened[i])) << i;
    } else {
      ASSERT_EQ(std::memcmp(&want, &widened[i], 4), 0) << i;
    }
  }
  std::mt19937 rng(7);
  std::vector<float> floats(1 << 16);
  for (float& f : floats) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (rng() % 2) bits = (bits & 0x80ffffffu) | ((100u + rng() % 60) << 23);  // near half range
    std::memcpy(&f, &bits, 4);
  }
  std::vector<uint16_t> narrowed(floats.size());
  cpu::FloatToHalfRow(floats.data(), narrowed.data(), static_cast<int64_t>(floats.size()));
  for (size_t i = 0; i < floats.size(); ++i) {
    const uint16_t want = Half::FromFloat(floats[i]);
    if (std::isnan(floats[i])) {
      ASSERT_TRUE(std::isnan(Half::ToFloat(narrowed[i]))) << i;
    } else {
      ASSERT_EQ(narrowed[i], want) << "float bits " << std::hex << floats[i];
    }
  }
  std::printf("F16C rows: %s\n", cpu::HalfRowsUseF16C() ? "yes" : "no (portable)");
}

// The one place that pins which kernel family the planner chooses for each layout
// class; the backends' tests check that the family they ran is the one named here.
TEST(Planner, ChoosesKernelPerLayout) {
  std::mt19937_64 rng(7);
  for (const testing::KernelCase& c : testing::KernelCases(rng)) {
    auto op = c.Prepare();
    ASSERT_TRUE(op.ok()) << c.name << ": " << op.status();
    EXPECT_EQ(KernelName(op->plan.kernel), KernelName(c.kernel)) << c.name;
  }
}

// The CPU's rule tiles every permuted plan (any dtypes, any rank, any number of staged
// inputs) and stages what moves faster along dim 1 than along dim 0; other plans as above.
// Under the CUDA rule, a cast through a transposed input or into a transposed output takes
// the tiles (its tile kernel converts), and so do float32 add, sub, mul and div; other ops
// with a second dtype keep the cast rows.
TEST(Planner, CastsThroughTransposesAreTiled) {
  std::vector<std::byte> storage(64 * 48 * 8);
  const auto view = [&](DType t, bool transposed) {
    return TensorView{t, {64, 48},       transposed ? DimVector{1, 64} : DimVector{48, 1},
                      0, storage.data(), static_cast<int64_t>(storage.size())};
  };
  const TensorView t32 = view(DType::kFloat32, true), d32 = view(DType::kFloat32, false);
  const TensorView t16 = view(DType::kFloat16, true);
  auto cast = PrepareOp("cast", {&t32, 1}, {{"dtype", DType::kBFloat16}});
  ASSERT_TRUE(cast.ok()) << cast.status();
  EXPECT_EQ(KernelName(cast->plan.kernel), KernelName(Kernel::kTiles));
  OutputOptions transposed_out;
  transposed_out.strides = {1, 64};
  auto cast_out = PrepareOp("cast", {&d32, 1}, {{"dtype", DType::kInt8}}, transposed_out);
  ASSERT_TRUE(cast_out.ok()) << cast_out.status();
  EXPECT_EQ(KernelName(cast_out->plan.kernel), KernelName(Kernel::kTiles));
  // float32 add converts in its tiles; maximum (and add computed in float16) keeps the cast
  // rows.
  const TensorView mixed[] = {d32, t16};
  auto add = PrepareOp("add", mixed, {});
  ASSERT_TRUE(add.ok()) << add.status();
  EXPECT_EQ(KernelName(add->plan.kernel), KernelName(Kernel::kTiles));
  auto maximum = PrepareOp("maximum", mixed, {});
  ASSERT_TRUE(maximum.ok()) << maximum.status();
  EXPECT_EQ(KernelName(maximum->plan.kernel), KernelName(Kernel::kCastRows));
  const TensorView t8 = view(DType::kInt8, true), d16 = view(DType::kFloat16, false);
  const TensorView half_mixed[] = {d16, t8};
  auto half_add = PrepareOp("add", half_mixed, {});
  ASSERT_TRUE(half_add.ok()) << half_add.status();
  EXPECT_EQ(KernelName(half_add->plan.kernel), KernelName(Kernel::kCastRows));
}

TEST(Planner, CpuTileRuleTilesEveryPermutedPlan) {
  std::mt19937_64 rng(9);
  for (const testing::KernelCase& c : testing::KernelCases(rng)) {
    auto op = c.Prepare(TileRule::kAnyPermuted);
    ASSERT_TRUE(op.ok()) << c.name << ": " << op.status();
    const Plan& p = op->plan;
    const Kernel want = c.permuted ? Kernel::kTiles : c.kernel;
    EXPECT_EQ(KernelName(p.kernel), KernelName(want)) << c.name;
    if (p.kernel != Kernel::kTiles) continue;
    for (int k = 1; k < p.num_operands; ++k) {
      const int64_t a0 = std::abs(p.strides[k][0]), a1 = std::abs(p.strides[k][1]);
      EXPECT_EQ(p.staged[k] >= 0, a1 != 0 && a1 < a0) << c.name << ", input " << k - 1;
    }
  }
}

TEST(Planner, RowAndTileGeometry) {
  std::mt19937_64 rng(8);
  for (const testing::KernelCase& c : testing::KernelCases(rng)) {
    auto op = c.Prepare();
    ASSERT_TRUE(op.ok()) << c.name;
    const Plan& p = op->plan;
    if (p.kernel == Kernel::kTiles) {
      // Staged inputs are dense along dim 1 and not along dim 0; one or two of them.
      EXPECT_GE(p.num_staged, 1) << c.name;
      EXPECT_LE(p.num_staged, 2) << c.name;
      EXPECT_EQ(p.staged[0], -1) << c.name;
      for (int k = 1; k < p.num_operands; ++k) {
        if (p.staged[k] < 0) continue;
        EXPECT_EQ(p.strides[k][1], ItemSize(p.dtypes[k])) << c.name;
        EXPECT_NE(p.strides[k][0], ItemSize(p.dtypes[k])) << c.name;
      }
      // Fused tile dims: dim 0 a power of two under 16 inside dim 2 (the output dense along
      // both), dim 1 a power of two inside dim 3 (the staged inputs' run going on there).
      if (p.fused[0] >= 0) {
        EXPECT_EQ(p.fused[0], 2) << c.name;
        EXPECT_LT(p.sizes[0], 16) << c.name;
        EXPECT_EQ(p.sizes[0] & (p.sizes[0] - 1), 0) << c.name;
        EXPECT_EQ(p.strides[0][2], p.sizes[0] * ItemSize(p.dtypes[0])) << c.name;
      }
      if (p.fused[1] >= 0) {
        EXPECT_EQ(p.fused[1], 3) << c.name;
        EXPECT_EQ(p.sizes[1] & (p.sizes[1] - 1), 0) << c.name;
        for (int k = 1; k < p.num_operands; ++k) {
          if (p.staged[k] >= 0) {
            EXPECT_EQ(p.strides[k][3], p.sizes[1] * ItemSize(p.dtypes[k])) << c.name;
          }
        }
      }
      EXPECT_EQ(p.fused[0] >= 0, c.name.find("fused") != std::string::npos) << c.name;
    } else {
      EXPECT_EQ(p.fused[0], -1) << c.name;
      EXPECT_EQ(p.fused[1], -1) << c.name;
    }
    if (p.kernel == Kernel::kRows || p.kernel == Kernel::kCastRows) {
      int64_t rows = 1;
      for (int d = 1; d < p.ndim; ++d) rows *= p.sizes[d];
      EXPECT_EQ(p.rows.cols, p.sizes[0]) << c.name;
      EXPECT_EQ(p.rows.count, rows) << c.name;
      EXPECT_EQ(p.rows.cols * p.rows.count, p.numel) << c.name;
      EXPECT_EQ(p.rows.vector_elems * ItemSize(p.compute_dtype), 16) << c.name;
      EXPECT_FALSE(p.rows.repeated[0]) << c.name;
    }
  }
  // A column broadcast: the column is one element per row; rows start 4 bytes apart in it.
  const TensorView in[] = {Contiguous({64, 128}), Contiguous({64, 1})};
  auto op = PrepareOp("add", in, {});
  ASSERT_TRUE(op.ok());
  EXPECT_TRUE(op->plan.rows.repeated[2]);
  EXPECT_EQ(op->plan.rows.stride_align[2], 4);
  EXPECT_TRUE(op->plan.rows.dense[1]);
  EXPECT_EQ(op->plan.rows.stride_align[1], 16);
  EXPECT_EQ(op->plan.rows.inner_rows, 64);
}

}  // namespace
}  // namespace tc

// The planner decides for expressions as for ops (PlanExpression), whatever backend follows.
namespace tc {
namespace {

TensorView ExprInput(DType dtype, const DimVector& shape, const DimVector& strides) {
  TensorView v;
  v.dtype = dtype;
  v.shape = shape;
  v.strides = strides;
  int64_t reach = 1;
  for (size_t d = 0; d < shape.size(); ++d) reach += (shape[d] - 1) * strides[d];
  v.storage_bytes = reach * ItemSize(dtype);
  return v;
}

ExprWalk WalkOf(const std::string& text, const std::vector<TensorView>& in,
                std::optional<DType> out = std::nullopt) {
  OutputOptions o;
  o.dtype = out;
  auto p = expr::PrepareExpression(text, {}, in, o);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status();
  return p.ok() ? p->expression->walk : ExprWalk{};
}

// Inputs dense along another dim than the output (transposed views) are staged through
// tiles, whatever their dtypes; tiles 32 x 64 while the staged tiles fit 48 KiB of shared
// memory, 32 x 32 past it.
TEST(ExpressionPlans, TransposedInputsTakeTheTiles) {
  const DimVector t{1, 64}, d{48, 1};
  ExprWalk w = WalkOf("sigmoid(a) * b + c", {ExprInput(DType::kFloat32, {64, 48}, t),
                                             ExprInput(DType::kInt8, {64, 48}, d),
                                             ExprInput(DType::kFloat16, {64, 48}, t)});
  EXPECT_EQ(KernelName(w.kernel), KernelName(Kernel::kTiles));
  EXPECT_EQ(w.num_staged, 2);
  EXPECT_EQ(w.staged[1], 0);
  EXPECT_EQ(w.staged[2], -1);
  EXPECT_EQ(w.staged[3], 1);
  EXPECT_EQ(w.unroll, 8);
  // Four staged float64 tiles take 4 x 32 x 65 x 8 bytes, past 48 KiB: 32 x 32 tiles.
  std::vector<TensorView> four(4, ExprInput(DType::kFloat64, {64, 48}, t));
  w = WalkOf("a + b + c + d", four);
  EXPECT_EQ(KernelName(w.kernel), KernelName(Kernel::kTiles));
  EXPECT_EQ(w.num_staged, 4);
  EXPECT_EQ(w.unroll, 4);
  // Dense inputs alone: rows.
  w = WalkOf("sigmoid(a) * b",
             {ExprInput(DType::kFloat32, {64, 48}, d), ExprInput(DType::kInt8, {64, 48}, d)});
  EXPECT_EQ(KernelName(w.kernel), KernelName(Kernel::kRows));
}

// Packs of 16 bytes of the widest operand; with mixed widths 16 bytes of the narrowest (up to
// 32 of the widest); rows repeated along a second dim twice that, up to 32 bytes; one pack per
// thread where long math or wide packs make each copy of the tree costly to compile.
TEST(ExpressionPlans, PackWidthsFollowTheOperandsWidths) {
  auto walk = [](DType in, DType out, const DimVector& shape, const char* text = "sigmoid(a * b)") {
    const DimVector strides = shape.size() == 1 ? DimVector{1} : DimVector{shape[1], 1};
    return WalkOf(text, {ExprInput(in, shape, strides), ExprInput(in, {shape.back()}, {1})}, out);
  };
  ExprWalk w = walk(DType::kFloat32, DType::kFloat32, {4096});
  EXPECT_EQ(w.vector, 4);
  EXPECT_EQ(w.unroll, 1);  // sigmoid: long math
  EXPECT_EQ(walk(DType::kFloat32, DType::kFloat32, {4096}, "a * b + 1").unroll, 2);
  EXPECT_EQ(walk(DType::kFloat16, DType::kFloat16, {4096}).vector, 8);
  w = walk(DType::kFloat16, DType::kFloat32, {4096}, "a * b");
  EXPECT_EQ(w.vector, 8);
  EXPECT_EQ(w.unroll, 1);
  EXPECT_EQ(walk(DType::kFloat64, DType::kFloat32, {4096}).vector, 4);
  w = walk(DType::kFloat32, DType::kFloat32, {64, 64});
  EXPECT_EQ(w.vector, 8);
  EXPECT_EQ(w.unroll, 2);
  EXPECT_EQ(walk(DType::kFloat16, DType::kFloat32, {64, 64}).vector, 8);
  // Rows 3 elements apart: no two elements of a row start on a pack's boundary.
  w = WalkOf("a + b",
             {ExprInput(DType::kFloat32, {64, 3}, {3, 1}), ExprInput(DType::kFloat32, {3}, {1})});
  EXPECT_EQ(KernelName(w.kernel), KernelName(Kernel::kRows));
  EXPECT_EQ(w.vector, 1);
  // A step along the row: element by element.
  w = WalkOf("a + 1", {ExprInput(DType::kFloat32, {4096}, {2})});
  EXPECT_EQ(w.vector, 1);
}

// The launcher narrows the pack to where the operands start; nothing else about the walk
// depends on the pointers.
TEST(ExpressionPlans, VectorsNarrowToWhereOperandsStart) {
  const std::vector<TensorView> in{ExprInput(DType::kFloat32, {4096}, {1}),
                                   ExprInput(DType::kFloat32, {4096}, {1})};
  auto p = expr::PrepareExpression("a * b + 1", {}, in);
  ASSERT_TRUE(p.ok()) << p.status();
  auto at = [](uintptr_t a) { return reinterpret_cast<char*>(a); };
  char* aligned[3] = {at(4096), at(8192), at(12288)};
  EXPECT_EQ(expr::VectorFor(*p->expression, aligned), 4);
  char* eight[3] = {at(4096), at(8192 + 8), at(12288)};
  EXPECT_EQ(expr::VectorFor(*p->expression, eight), 2);
  char* four[3] = {at(4096 + 4), at(8192), at(12288)};
  EXPECT_EQ(expr::VectorFor(*p->expression, four), 1);
}

// More than two dims that do not coalesce: the general walk, the ops' elements a thread (one
// where the tree has long math); past 2^31 bytes of reach it is launched in pieces
// (SplitForIndexing), not planned otherwise.
TEST(ExpressionPlans, HigherRanksTakeTheGeneralWalk) {
  ExprWalk w = WalkOf("a + b", {ExprInput(DType::kFloat32, {2, 3, 4}, {1, 8, 2}),
                                ExprInput(DType::kFloat32, {4}, {1})});
  EXPECT_EQ(KernelName(w.kernel), KernelName(Kernel::kGeneral));
  EXPECT_EQ(w.unroll, 4);
  w = WalkOf("a + b", {ExprInput(DType::kFloat32, {2, 3, 4}, {int64_t{1} << 30, 8, 2}),
                       ExprInput(DType::kFloat32, {4}, {1})});
  EXPECT_EQ(KernelName(w.kernel), KernelName(Kernel::kGeneral));
  EXPECT_EQ(w.unroll, 4);
  w = WalkOf("erf(a) + b", {ExprInput(DType::kFloat32, {2, 3, 4}, {1, 8, 2}),
                            ExprInput(DType::kFloat32, {4}, {1})});
  EXPECT_EQ(KernelName(w.kernel), KernelName(Kernel::kGeneral));
  EXPECT_EQ(w.unroll, 1);
}

}  // namespace
}  // namespace tc

namespace tc {
namespace {

// ChooseTileDims on its own: operand k's byte stride along dim d at strides[k][d], dims
// fastest first, operand 0 the output.
struct TileCase {
  int ndim;
  int operands;
  int64_t sizes[kMaxRank];
  int64_t strides[kMaxOperands][kMaxRank];
  int64_t item[kMaxOperands];
  int8_t staged[kMaxOperands] = {-1, -1, -1, -1};
  int8_t fused[2] = {-1, -1};
  int Choose(int max_staged = 2, bool fuse = true) {
    return ChooseTileDims(ndim, operands, sizes, &strides[0][0], kMaxRank, item, max_staged, staged,
                          fuse ? fused : nullptr);
  }
};

TEST(TileDims, ATransposedInputIsStagedAlongItsDenseDim) {
  // out[64 x 48] dense along dim 0; a dense too; b dense along dim 1 (transposed): b staged.
  TileCase c{2, 3, {64, 48}, {{4, 256}, {4, 256}, {192, 4}}, {4, 4, 4}};
  EXPECT_EQ(c.Choose(), 1);
  EXPECT_EQ(c.staged[0], -1);
  EXPECT_EQ(c.staged[1], -1);
  EXPECT_EQ(c.staged[2], 0);
  EXPECT_EQ(c.sizes[0], 64);
  EXPECT_EQ(c.sizes[1], 48);
  EXPECT_EQ(c.fused[0], -1);
}

TEST(TileDims, TheStagedDimMovesToDimOne) {
  // Three dims; the input is dense along dim 2: dims become 0, 2, 1.
  TileCase c{3, 2, {32, 5, 24}, {{8, 256, 1280}, {24 * 5 * 8, 24 * 8, 8}}, {8, 8}};
  EXPECT_EQ(c.Choose(), 1);
  EXPECT_EQ(c.sizes[0], 32);
  EXPECT_EQ(c.sizes[1], 24);
  EXPECT_EQ(c.sizes[2], 5);
  EXPECT_EQ(c.strides[1][1], 8);
  EXPECT_EQ(c.strides[0][2], 256);
  EXPECT_EQ(c.staged[1], 0);
}

TEST(TileDims, RefusedWhereTilesDoNotApply) {
  // The output not dense along dim 0.
  TileCase out{2, 2, {64, 64}, {{256, 4}, {4, 256}}, {4, 4}};
  EXPECT_EQ(out.Choose(), 0);
  // Every input dense along dim 0 (or repeated): nothing to stage.
  TileCase dense{2, 3, {64, 64}, {{4, 256}, {4, 256}, {0, 4}}, {4, 4, 4}};
  EXPECT_EQ(dense.Choose(), 0);
  // More inputs to stage than tiles fit.
  TileCase many{2, 4, {64, 64}, {{2, 128}, {128, 2}, {128, 2}, {128, 2}}, {2, 2, 2, 2}};
  EXPECT_EQ(many.Choose(/*max_staged=*/2), 0);
  EXPECT_EQ(many.Choose(/*max_staged=*/3), 3);
  // The staged dim too short.
  TileCase short_dim{2, 2, {64, 8}, {{4, 256}, {32, 4}}, {4, 4}};
  EXPECT_EQ(short_dim.Choose(), 0);
  // A stride of a tile dim past 2^23 bytes: a tile's offsets would not fit 32 bits.
  TileCase far{2, 2, {64, 64}, {{4, int64_t{1} << 23}, {int64_t{1} << 23, 4}}, {4, 4}};
  EXPECT_EQ(far.Choose(), 0);
  // A rank-one plan.
  TileCase one{1, 2, {64}, {{4}, {4}}, {4, 4}};
  EXPECT_EQ(one.Choose(), 0);
}

TEST(TileDims, AShortDenseRunIsFusedWithTheOutputsNextDim) {
  // out[8 x 64 x 32 x 4] dense along only 8 elements (a small permutation); the input dense
  // along dim 2, its run going on in dim 1. With fused tiles: dims become 0, 2 (staged),
  // 3 (dim 0's outer part: the output's fastest dim left), 1 (dim 2's outer part).
  const auto make = [] {
    return TileCase{
        4, 2, {8, 64, 32, 4}, {{4, 32, 32 * 64, 32 * 64 * 32}, {8192, 128, 4, 65536}}, {4, 4}};
  };
  TileCase without = make();
  EXPECT_EQ(without.Choose(2, /*fuse=*/false), 0);
  TileCase with = make();
  EXPECT_EQ(with.Choose(2, /*fuse=*/true), 1);
  EXPECT_EQ(with.sizes[0], 8);
  EXPECT_EQ(with.sizes[1], 32);
  EXPECT_EQ(with.sizes[2], 4);
  EXPECT_EQ(with.sizes[3], 64);
  EXPECT_EQ(with.fused[0], 2);
  EXPECT_EQ(with.fused[1], 3);
  EXPECT_EQ(with.staged[0], -1);
  EXPECT_EQ(with.staged[1], 0);
  EXPECT_EQ(with.strides[1][1], 4);
  EXPECT_EQ(with.strides[0][2], 32 * 64 * 32);
}

}  // namespace
}  // namespace tc
