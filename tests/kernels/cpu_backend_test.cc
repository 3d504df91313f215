#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/expr/program.h"
#include "kernels/ops/unary.h"
#include "tests/support/cpu_backend.h"
#include "kernels/cpu/launch_env.h"
#include "tests/support/kernel_cases.h"
#include "tests/support/conformance.h"
#include "tests/support/random_tensors.h"

namespace tc {
namespace {

TEST(CpuBackend, EveryOpMatchesTheReference) {
  const uint64_t seed = testing::TestSeed();
  std::printf("TC_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  CpuBackend backend(2);
  testing::CheckConformance(backend, seed, {});
}

TEST(CpuBackend, EveryDtypeCombinationMatchesTheReference) {
  const uint64_t seed = testing::TestSeed() ^ 0x5bd1e995ull;
  std::printf("TC_TEST_SEED=%llu (xor 0x5bd1e995)\n", static_cast<unsigned long long>(seed));
  CpuBackend backend(2);
  testing::ConformanceOptions options;
  options.every_dtype_combination = true;
  options.max_numel = 2048;
  testing::CheckConformance(backend, seed, options);
}

// Fewer cases, but large enough that rows split across threads and blocks.
TEST(CpuBackend, LargeTensorsMatchTheReference) {
  const uint64_t seed = testing::TestSeed() ^ 0x9e3779b97f4a7c15ull;
  std::printf("TC_TEST_SEED=%llu (xor 0x9e3779b97f4a7c15)\n",
              static_cast<unsigned long long>(seed));
  CpuBackend backend(3);
  testing::ConformanceOptions options;
  options.cases_per_op = 2;
  options.max_numel = 300000;
  options.max_rank = 4;
  testing::CheckConformance(backend, seed, options);
}

// Large enough to be split across threads, with a broadcast operand.
TEST(CpuBackend, ThreadedRowBroadcast) {
  CpuBackend backend(3);
  const int64_t m = 1031, n = 777;
  std::vector<float> a(m * n), b(n);
  for (int64_t i = 0; i < m * n; ++i) a[i] = static_cast<float>(i % 1000);
  for (int64_t j = 0; j < n; ++j) b[j] = static_cast<float>(j);
  TensorView va{DType::kFloat32, {m, n}, {n, 1}, 0, reinterpret_cast<const std::byte*>(a.data()),
                m * n * 4};
  TensorView vb{DType::kFloat32, {n}, {1}, 0, reinterpret_cast<const std::byte*>(b.data()), n * 4};
  const TensorView inputs[] = {va, vb};
  auto op = PrepareOp("add", inputs, {});
  ASSERT_TRUE(op.ok()) << op.status();
  std::vector<float> out(m * n);
  ASSERT_TRUE(backend.Run(*op, inputs, reinterpret_cast<std::byte*>(out.data())).ok());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(out[i * n + j], a[i * n + j] + b[j]) << i << "," << j;
    }
  }
}

// Runs every op under the baseline copy of the CPU loops and under a wider one (AVX2,
// AVX-512: kernels/cpu/isa.h) and requires the same bytes from both (any NaN for a NaN), so that
// the conformance cases (every op, dtype, broadcast, layout, NaN and infinities) hold the wider
// copies to the baseline bit for bit, not only to the reference's tolerance.
class IsaAgreementBackend : public Backend {
 public:
  explicit IsaAgreementBackend(cpu::Isa isa) : isa_(isa), pool_(ThreadPool::WorkersFor(2)) {}
  absl::string_view name() const override { return "cpu"; }
  TileRule tile_rule() const override { return TileRule::kAnyPermuted; }
  absl::Status Run(const PreparedOp& op, absl::Span<const TensorView> inputs,
                   std::byte* out) override {
    const size_t bytes = static_cast<size_t>(op.plan.out_storage_bytes);
    std::vector<std::byte> baseline(out, out + bytes);  // bytes the op does not write agree
    cpu::LaunchEnv env{&pool_};
    env.isa = static_cast<int>(cpu::Isa::kBaseline);
    const absl::Status expected = cpu::Run(op, baseline.data(), inputs, env);
    env.isa = static_cast<int>(isa_);
    absl::Status status = cpu::Run(op, out, inputs, env);
    const std::string what = op.op != nullptr ? std::string(op.op->spec.name) : "an expression";
    EXPECT_EQ(status.code(), expected.code()) << what << ": " << status << " / " << expected;
    ++runs;
    if (status.ok() && expected.ok()) {
      const int64_t item = ItemSize(op.plan.out_dtype);
      for (size_t i = 0; i + static_cast<size_t>(item) <= bytes; i += static_cast<size_t>(item)) {
        if (std::memcmp(out + i, baseline.data() + i, static_cast<size_t>(item)) == 0) continue;
        if (IsNaN(op.plan.out_dtype, out + i) && IsNaN(op.plan.out_dtype, baseline.data() + i))
          continue;
        ADD_FAILURE() << what << " under " << cpu::IsaName(isa_)
                      << " differs from the baseline at byte " << i << " of " << bytes;
        break;
      }
    }
    return status;
  }
  // NaN against NaN is no difference: which operand's NaN an instruction passes on (its sign,
  // its payload) follows the register order the compiler picked, which differs between
  // levels.
  static bool IsNaN(DType t, const std::byte* p) {
    switch (t) {
      case DType::kFloat16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
      }
      case DType::kBFloat16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
      }
      case DType::kFloat32: {
        float f;
        std::memcpy(&f, p, 4);
        return std::isnan(f);
      }
      case DType::kFloat64: {
        double d;
        std::memcpy(&d, p, 8);
        return std::isnan(d);
      }
      default:
        return false;
    }
  }
  int runs = 0;

 private:
  cpu::Isa isa_;
  ThreadPool pool_;
};

TEST(CpuBackend, EveryVectorLevelGivesTheBaselineBytes) {
  const uint64_t seed = testing::TestSeed() ^ 0x27d4eb2full;
  std::printf("TC_TEST_SEED=%llu (xor 0x27d4eb2f); this process runs %s\n",
              static_cast<unsigned long long>(seed), cpu::IsaName(cpu::ProcessIsa()));
  int levels = 0;
  for (cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (!cpu::IsaAvailable(isa)) {
      std::printf("%s: not available on this machine or build\n", cpu::IsaName(isa));
      continue;
    }
    ++levels;
    IsaAgreementBackend backend(isa);
    testing::CheckConformance(backend, seed, {});
    testing::ConformanceOptions combinations;
    combinations.every_dtype_combination = true;
    combinations.max_numel = 2048;
    testing::CheckConformance(backend, seed, combinations);
    std::printf("%s: %d runs, each equal to the baseline's\n", cpu::IsaName(isa), backend.runs);
    EXPECT_GT(backend.runs, 1000);
  }
  if (levels == 0) GTEST_SKIP() << "no vector level past the baseline on this machine";
}

// sigmoid's float row (one pass of 16 lanes where the CPU has AVX-512) gives the bits of its
// three steps: negate, the vector exponential, 1 / (1 + e); at every length and start, for
// NaN, infinities, zeros of both signs and values where exp overflows.
TEST(CpuBackend, SigmoidRowIsItsThreeSteps) {
  std::mt19937 rng(static_cast<uint32_t>(testing::TestSeed()));
  std::uniform_real_distribution<float> uni(-100.0f, 100.0f);
  std::vector<float> a(1000);
  for (float& x : a) x = uni(rng);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN,
                            -NAN, 88.7f, -88.8f,   -104.0f,   1e-40f};
  for (size_t i = 0; i < std::size(specials); ++i) a[i * 37] = specials[i];
  for (int64_t start : {0, 1, 5, 16}) {
    for (int64_t n : {1, 15, 16, 17, 33, 64, 333, 900}) {
      std::vector<float> out(static_cast<size_t>(n)), expected(static_cast<size_t>(n));
      SigmoidOp::HostFloatRow(a.data() + start, out.data(), n);
      for (int64_t i = 0; i < n; ++i) expected[i] = -a[start + i];
      cpu::UnaryRow(cpu::VectorFn::kExp, expected.data(), expected.data(), n);
      for (int64_t i = 0; i < n; ++i) expected[i] = 1.0f / (1.0f + expected[i]);
      ASSERT_EQ(std::memcmp(out.data(), expected.data(), static_cast<size_t>(n) * 4), 0)
          << "start " << start << " n " << n;
    }
  }
}

// Outputs past the streaming threshold (8 MiB), dense and broadcast, same and mixed dtypes,
// against plain loops. Whether they are written with streaming or plain stores is the
// machine's (kernels/cpu/store_path.h); ctest runs this again with TC_CPU_STREAMING_STORES
// set either way (cpu_backend_test_streaming_on / _off), so both paths are tested anywhere.
TEST(CpuBackend, LargeOutputsMatchTheReference) {
  CpuBackend backend(2);
  std::mt19937 rng(static_cast<uint32_t>(testing::TestSeed()));
  std::uniform_real_distribution<float> uni(-100.0f, 100.0f);
  const int64_t m = 1501, n = 2053;  // 12 MiB of float32, rows not a multiple of a vector
  std::vector<float> a(m * n), b(m * n), col(m);
  for (float& x : a) x = uni(rng);
  for (float& x : b) x = uni(rng);
  for (float& x : col) x = uni(rng);
  auto f32 = [](const std::vector<float>& v, DimVector shape) {
    return TensorView{DType::kFloat32,
                      shape,
                      ContiguousStrides(shape),
                      0,
                      reinterpret_cast<const std::byte*>(v.data()),
                      static_cast<int64_t>(v.size() * sizeof(float))};
  };
  {
    const TensorView inputs[] = {f32(a, {m, n}), f32(b, {m, n})};
    auto op = PrepareOp("mul", inputs, {});
    ASSERT_TRUE(op.ok()) << op.status();
    std::vector<float> out(m * n);
    ASSERT_TRUE(backend.Run(*op, inputs, reinterpret_cast<std::byte*>(out.data())).ok());
    for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(out[i], a[i] * b[i]) << i;
  }
  {
    const TensorView inputs[] = {f32(a, {m, n}), f32(col, {m, 1})};
    auto op = PrepareOp("sub", inputs, {});
    ASSERT_TRUE(op.ok()) << op.status();
    std::vector<float> out(m * n);
    ASSERT_TRUE(backend.Run(*op, inputs, reinterpret_cast<std::byte*>(out.data())).ok());
    for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(out[i], a[i] - col[i / n]) << i;
  }
  {
    // float32 computed, stored as float64: converted while storing. 24 MiB out.
    const TensorView inputs[] = {f32(a, {m, n}), f32(b, {m, n})};
    OutputOptions options;
    options.dtype = DType::kFloat64;
    auto op = PrepareOp("add", inputs, {}, options);
    ASSERT_TRUE(op.ok()) << op.status();
    std::vector<double> out(m * n);
    ASSERT_TRUE(backend.Run(*op, inputs, reinterpret_cast<std::byte*>(out.data())).ok());
    for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(out[i], static_cast<double>(a[i] + b[i])) << i;
  }
  {
    // A fused expression: its output is written block by block, streamed where large ones are.
    const TensorView inputs[] = {f32(a, {m, n}), f32(b, {m, n})};
    auto op = expr::PrepareExpression("a * 2 - b", {}, inputs, {});
    ASSERT_TRUE(op.ok()) << op.status();
    std::vector<float> out(m * n);
    ASSERT_TRUE(backend.Run(*op, inputs, reinterpret_cast<std::byte*>(out.data())).ok());
    for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(out[i], a[i] * 2.0f - b[i]) << i;
  }
}

// Distance in units in the last place between two floats of the same sign (0 for equal
// values, NaN and NaN).
int64_t UlpsApart(float x, float y) {
  if (std::isnan(x) && std::isnan(y)) return 0;
  if (x == y) return 0;
  if (std::signbit(x) != std::signbit(y)) return int64_t{1} << 32;
  int32_t ix, iy;
  std::memcpy(&ix, &x, 4);
  std::memcpy(&iy, &y, 4);
  return std::llabs(static_cast<int64_t>(ix) - iy);
}

// The vectorized pow row against pow in double rounded once: within an ulp everywhere (large
// exponents near 1, results near overflow and in the subnormal range, subnormal bases), and
// C's pow for the special values; the same value whatever its position in a row.
TEST(CpuBackend, PowRowWithinAnUlp) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f), exps(-149.0f, 127.0f), ys(-40.0f, 40.0f);
  const int64_t n = 200003;  // not a multiple of the 16 lanes
  std::vector<float> a(n), b(n), out(n);
  const auto draw = [&](int64_t i) -> std::pair<float, float> {
    switch (i % 6) {
      case 0:
        return {u01(rng), u01(rng)};
      case 1:
        return {std::exp2(exps(rng)), ys(rng)};
      case 2:
        return {1.0f + (u01(rng) - 0.5f) * 1e-3f, ys(rng) * 5000.0f};
      case 3:
        return {u01(rng) * 1e-39f, u01(rng) * 2.0f};
      case 4:
        return {(u01(rng) - 0.5f) * 60.0f, std::round(ys(rng))};
      default:
        return {std::exp2(exps(rng)) * 0.999f, 127.9f / std::log2(1.0f + u01(rng) * 3.0f)};
    }
  };
  for (int64_t i = 0; i < n; ++i) std::tie(a[i], b[i]) = draw(i);
  const float specials[] = {0.0f,   -0.0f,   1.0f,     -1.0f,     2.0f, 0.5f,       -2.5f,
                            1e-45f, 3.4e38f, INFINITY, -INFINITY, NAN,  1.0000001f, 0.99999994f};
  int64_t k = 0;
  for (float x : specials) {
    for (float y : specials) {
      a[k] = x;
      b[k] = y;
      ++k;
    }
  }
  cpu::PowRow(a.data(), b.data(), out.data(), n);
  // Without AVX-512 the row goes through glibc's 8- or 4-lane powf, good to two ulps.
  __builtin_cpu_init();
  const int64_t tolerance =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") ? 1 : 2;
  int64_t inexact = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want =
        static_cast<float>(std::pow(static_cast<double>(a[i]), static_cast<double>(b[i])));
    const int64_t ulps = UlpsApart(out[i], want);
    ASSERT_LE(ulps, tolerance) << "pow(" << a[i] << ", " << b[i] << ") = " << out[i] << ", want "
                               << want << " (seed " << seed << ")";
    if (i < k) {
      EXPECT_EQ(UlpsApart(out[i], std::pow(a[i], b[i])), 0)
          << "pow(" << a[i] << ", " << b[i] << ")";
    }
    inexact += ulps != 0;
  }
  EXPECT_LT(inexact, n / 100) << "results not correctly rounded";
  // Every position of a 16-lane block, and the padded tail, gives the same value.
  for (int64_t len = 1; len <= 40; ++len) {
    std::vector<float> part(len);
    cpu::PowRow(a.data() + 3 * len, b.data() + 3 * len, part.data(), len);
    for (int64_t i = 0; i < len; ++i) {
      ASSERT_EQ(UlpsApart(part[i], out[3 * len + i]), 0) << len << " " << i;
    }
  }
}

TEST(CpuBackend, EmptyAndScalar) {
  CpuBackend backend(1);
  float x = 1.5f, y = 2.0f;
  TensorView sx{DType::kFloat32, {}, {}, 0, reinterpret_cast<const std::byte*>(&x), 4};
  TensorView sy{DType::kFloat32, {}, {}, 0, reinterpret_cast<const std::byte*>(&y), 4};
  const TensorView scalars[] = {sx, sy};
  auto op = PrepareOp("add", scalars, {{"alpha", 3.0}});
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_TRUE(op->plan.out_shape.empty());
  float out = 0;
  ASSERT_TRUE(backend.Run(*op, scalars, reinterpret_cast<std::byte*>(&out)).ok());
  EXPECT_EQ(out, 7.5f);

  TensorView empty{DType::kFloat32, {0, 3}, {3, 1}, 0, nullptr, 0};
  const TensorView with_empty[] = {empty, sx};
  auto op2 = PrepareOp("add", with_empty, {});
  ASSERT_TRUE(op2.ok()) << op2.status();
  EXPECT_EQ(op2->plan.numel, 0);
  EXPECT_EQ(op2->plan.out_shape, (DimVector{0, 3}));
  EXPECT_TRUE(backend.Run(*op2, with_empty, nullptr).ok());
}

// Each plan runs as the kernel family the planner named: the tile loop for kTiles, the row
// loop for every other family; with the result computed independently.
TEST(CpuBackend, RunsTheKernelThePlanNames) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  ThreadPool pool(2);
  // Planned for the CPU (every permuted plan tiled) and for the GPU (which the CPU must run
  // as well, e.g. a plan made before a device was chosen).
  for (const TileRule rule : {TileRule::kAnyPermuted, TileRule::kDense}) {
    for (const testing::KernelCase& c : testing::KernelCases(rng)) {
      auto op = c.Prepare(rule);
      ASSERT_TRUE(op.ok()) << c.name << ": " << op.status();
      std::vector<std::byte> out(static_cast<size_t>(op->plan.out_storage_bytes));
      char* base[kMaxOperands];
      OperandBases(op->plan, out.data(), c.Views(), base);
      Kernel ran = Kernel::kGeneral;
      ASSERT_TRUE(cpu::LaunchOp(*op, base, cpu::LaunchEnv{&pool, &ran}).ok()) << c.name;
      const Kernel want = op->plan.kernel == Kernel::kTiles ? Kernel::kTiles : Kernel::kRows;
      EXPECT_EQ(KernelName(ran), KernelName(want)) << c.name << " (seed " << seed << ")";
      EXPECT_EQ(testing::CheckKernelCase(c, *op, out), "") << c.name << " (seed " << seed << ")";
    }
  }
}

}  // namespace
}  // namespace tc
