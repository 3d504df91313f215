// The CPU device through the runtime interface the server uses; cuda_backend_test runs the
// same checks on a GPU.
#include "gtest/gtest.h"
#include "runtime/cpu_device.h"
#include "tests/support/device_backend.h"
#include "tests/support/conformance.h"
#include "tests/support/device_checks.h"
#include "tests/support/random_tensors.h"

namespace tc {
namespace {

std::unique_ptr<runtime::Device> MakeCpu(const runtime::DeviceOptions& options) {
  return std::make_unique<runtime::CpuDevice>(2, options);
}

TEST(CpuDeviceTest, Budget) { testing::CheckBudget(MakeCpu); }
TEST(CpuDeviceTest, Copies) { testing::CheckCopies(MakeCpu); }
TEST(CpuDeviceTest, ConcurrentRuns) { testing::CheckConcurrentRuns(MakeCpu); }

TEST(CpuDeviceTest, ConformanceThroughDeviceStorage) {
  auto device = MakeCpu({});
  runtime::DeviceBackend backend(device.get());
  testing::ConformanceOptions options;
  options.cases_per_op = 8;
  testing::CheckConformance(backend, testing::TestSeed() ^ 0x2545F491ull, options);
  EXPECT_EQ(device->memory_in_use(), 0);
}

TEST(CpuDeviceTest, CopiesBetweenDevices) {
  auto a = MakeCpu({}), b = MakeCpu({});
  testing::CheckCopiesBetween(*a, *b);
}

TEST(DeviceSetTest, LeastLoadedTakesIdleDevicesInTurn) {
  std::vector<std::unique_ptr<runtime::Device>> devices;
  devices.push_back(MakeCpu({}));
  devices.push_back(MakeCpu({}));
  runtime::DeviceSet set(std::move(devices));
  int picked[2] = {0, 0};
  for (int i = 0; i < 10; ++i) ++picked[&set.LeastLoaded() == &set.at(0) ? 0 : 1];
  EXPECT_EQ(picked[0], 5);
  EXPECT_EQ(picked[1], 5);
  EXPECT_EQ(set.usable(), 2);
}

// A device of another backend, as far as planning sees it: the GPU's tile rule.
class DenseTilesDevice final : public runtime::Device {
 public:
  DenseTilesDevice() : Device(runtime::DeviceInfo{}, 1 << 20, runtime::DeviceOptions{}) {}
  bool host_memory() const override { return false; }
  std::unique_ptr<runtime::Lane> AcquireLane() override {
    return std::make_unique<runtime::Lane>();
  }
  absl::Status Sync(runtime::Lane&) override { return absl::OkStatus(); }
  void Run(runtime::Lane&, const PreparedOp&, std::vector<TensorView>, std::byte*,
           std::function<void(absl::Status)> done, ReadBack) override {
    done(absl::UnimplementedError("planning only"));
  }

 protected:
  absl::Status DoWrite(runtime::Lane&, runtime::Storage&, int64_t, const void*, int64_t) override {
    return absl::UnimplementedError("planning only");
  }
  absl::Status DoRead(runtime::Lane&, const runtime::Storage&, int64_t, void*, int64_t) override {
    return absl::UnimplementedError("planning only");
  }
  absl::StatusOr<std::byte*> RawAllocate(int64_t, bool, runtime::Lane*, void**) override {
    return absl::UnimplementedError("planning only");
  }
  void RawFree(std::byte*, int64_t, void*) override {}
};

TEST(DeviceSetTest, TileRuleIsTheDevicesOwnWhereTheyAgree) {
  std::vector<std::unique_ptr<runtime::Device>> same;
  same.push_back(MakeCpu({}));
  same.push_back(MakeCpu({}));
  EXPECT_EQ(runtime::DeviceSet(std::move(same)).tile_rule(), TileRule::kAnyPermuted);
  std::vector<std::unique_ptr<runtime::Device>> mixed;
  mixed.push_back(MakeCpu({}));
  mixed.push_back(std::make_unique<DenseTilesDevice>());
  EXPECT_EQ(runtime::DeviceSet(std::move(mixed)).tile_rule(), TileRule::kDense);
}

TEST(DeviceSetTest, OnlyGpusHaveTheOptionalCapabilities) {
  auto cpu = MakeCpu({});
  EXPECT_EQ(cpu->host_maps(), nullptr);
  EXPECT_EQ(cpu->ipc(), nullptr);
  EXPECT_EQ(cpu->quick_runs(), nullptr);
  // Host memory is reached directly, pinned or not.
  std::vector<char> host(64);
  EXPECT_TRUE(cpu->Reaches(host.data(), 64));
}

TEST(DeviceSetTest, LeastLoadedPicksFewestInFlight) {
  std::vector<std::unique_ptr<runtime::Device>> devices;
  devices.push_back(MakeCpu({}));
  devices.push_back(MakeCpu({}));
  runtime::DeviceSet set(std::move(devices));
  {
    std::optional<runtime::Admission> first = set.at(0).TryAdmit(1);
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(set.at(0).in_flight(), 1);
    EXPECT_EQ(&set.LeastLoaded(), &set.at(1));
    EXPECT_FALSE(set.at(0).TryAdmit(1).has_value());  // The limit holds.
  }
  // The slot came back with the admission.
  EXPECT_EQ(set.at(0).in_flight(), 0);
  EXPECT_TRUE(set.at(0).TryAdmit(1).has_value());
  EXPECT_EQ(set.at(0).admitted(), 2);
}

}  // namespace
}  // namespace tc
