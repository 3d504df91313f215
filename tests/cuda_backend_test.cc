// The CUDA backend against the reference and the CPU backend. Skips where no GPU is visible.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/cuda_device.h"
#include "runtime/device_backend.h"
#include "tests/conformance.h"
#include "tests/device_checks.h"
#include "tests/random_tensors.h"

namespace tc {
namespace {

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (runtime::CudaDevice::Count() == 0) {
      GTEST_SKIP() << "no CUDA device visible: skipping GPU tests";
    }
    auto d = runtime::CudaDevice::Create(0, {});
    ASSERT_TRUE(d.ok()) << d.status();
    device_ = *std::move(d);
    backend_ = std::make_unique<runtime::DeviceBackend>(device_.get());
  }
  std::unique_ptr<runtime::CudaDevice> device_;
  std::unique_ptr<runtime::DeviceBackend> backend_;
};

TEST_F(CudaBackendTest, EveryOpMatchesTheReference) {
  const uint64_t seed = testing::TestSeed();
  std::printf("TC_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  testing::CheckConformance(*backend_, seed, {});
}

TEST_F(CudaBackendTest, EveryDtypeCombinationMatchesTheReference) {
  const uint64_t seed = testing::TestSeed() ^ 0x5bd1e995ull;
  testing::ConformanceOptions options;
  options.every_dtype_combination = true;
  options.max_numel = 2048;
  testing::CheckConformance(*backend_, seed, options);
}

TEST_F(CudaBackendTest, LargeTensorsMatchTheReference) {
  const uint64_t seed = testing::TestSeed() ^ 0x9e3779b97f4a7c15ull;
  testing::ConformanceOptions options;
  options.cases_per_op = 2;
  options.max_numel = 300000;
  options.max_rank = 4;
  testing::CheckConformance(*backend_, seed, options);
}

// Bit-for-bit the CPU result on a large contiguous add (no multiply: alpha 1).
TEST_F(CudaBackendTest, LargeContiguousMatchesCpu) {
  const int64_t n = (int64_t{1} << 24) + 3;
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 4099) * 0.25f;
    b[i] = static_cast<float>(i % 977) - 400.0f;
  }
  TensorView va{DType::kFloat32, {n}, {1}, 0, reinterpret_cast<const std::byte*>(a.data()), n * 4};
  TensorView vb{DType::kFloat32, {n}, {1}, 0, reinterpret_cast<const std::byte*>(b.data()), n * 4};
  const TensorView inputs[] = {va, vb};
  auto op = PrepareOp("add", inputs, {});
  ASSERT_TRUE(op.ok());
  EXPECT_EQ(op->plan.path, Path::kContiguous);
  std::vector<float> gpu(n), cpu(n);
  ASSERT_TRUE(backend_->Run(*op, inputs, reinterpret_cast<std::byte*>(gpu.data())).ok());
  CpuBackend cpu_backend;
  ASSERT_TRUE(cpu_backend.Run(*op, inputs, reinterpret_cast<std::byte*>(cpu.data())).ok());
  EXPECT_EQ(std::memcmp(gpu.data(), cpu.data(), n * 4), 0);
}

std::unique_ptr<runtime::Device> MakeCuda(const runtime::DeviceOptions& options) {
  auto d = runtime::CudaDevice::Create(0, options);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

// The small-request path: inputs and output packed into one staging buffer and one block.
TEST_F(CudaBackendTest, SmallPathMatchesTheReference) {
  runtime::DeviceBackend small(device_.get(), /*small_first=*/true);
  testing::ConformanceOptions options;
  options.max_numel = 4096;
  testing::CheckConformance(small, testing::TestSeed() ^ 0x51ull, options);
  options.every_dtype_combination = true;
  options.max_numel = 512;
  testing::CheckConformance(small, testing::TestSeed() ^ 0x52ull, options);
  EXPECT_EQ(device_->memory_in_use(), 0);
}

TEST_F(CudaBackendTest, Budget) { testing::CheckBudget(MakeCuda); }
TEST_F(CudaBackendTest, Copies) { testing::CheckCopies(MakeCuda); }
TEST_F(CudaBackendTest, ConcurrentRunsShareStreams) { testing::CheckConcurrentRuns(MakeCuda); }

}  // namespace
}  // namespace tc
