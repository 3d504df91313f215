#include "gtest/gtest.h"
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
  std::printf("TC_TEST_SEED=%llu (xor 0x9e3779b97f4a7c15)\n", static_cast<unsigned long long>(seed));
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
  TensorView va{DType::kFloat32, {m, n}, {n, 1}, 0,
                reinterpret_cast<const std::byte*>(a.data()), m * n * 4};
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
  for (const TileRule rule : {TileRule::kAnyPermuted, TileRule::kDenseSameTypes}) {
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
