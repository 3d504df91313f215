// RemoteDevice and its worker on their own (server/worker/): the front door's side of the
// protocol against a real worker process (this binary started again with --worker_fd, serving
// a CPU device), without the gRPC server. Every check a runtime Device must pass (the budget,
// copies across staging-buffer halves, concurrent runs, copies between two devices), then
// runs over the protocol against the reference, frees carried by later requests, and a
// killed worker failing its device until the next one takes its place.
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "kernels/engine.h"
#include "runtime/cpu_device.h"
#include "server/worker/remote_device.h"
#include "server/worker/worker.h"
#include "tests/support/device_checks.h"
#include "tests/support/random_tensors.h"

namespace tc::server::worker {
namespace {

std::unique_ptr<RemoteDevice> Start(const runtime::DeviceOptions& options, int index = 0) {
  WorkerLaunch launch;
  launch.index = index;
  // What the worker's own device is made with (read by main() below in the worker).
  launch.server_args = {absl::StrCat("--test_budget=", options.memory_budget)};
  auto d = RemoteDevice::Start(launch, options);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

std::unique_ptr<runtime::Device> MakeRemote(const runtime::DeviceOptions& options) {
  return Start(options);
}

TEST(RemoteDevice, PassesEveryDeviceCheck) {
  testing::CheckBudget(MakeRemote);
  testing::CheckCopies(MakeRemote);
  testing::CheckConcurrentRuns(MakeRemote);
}

TEST(RemoteDevice, CopiesBetweenTwoWorkers) {
  runtime::DeviceOptions o;
  o.memory_budget = int64_t{1} << 30;
  auto a = Start(o, 0);
  auto b = Start(o, 1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->worker_pid(), b->worker_pid());
  testing::CheckCopiesBetween(*a, *b);
  testing::CheckCopiesBetween(*b, *a);
}

// `op` over two float32 inputs of `n` elements written to `d`, run there (or, small, straight
// from the host): the output read back.
std::vector<float> RunOn(RemoteDevice& d, const std::vector<float>& x, const std::vector<float>& y,
                         const char* op, bool small) {
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t bytes = n * 4;
  TensorView vx{DType::kFloat32, {n}, {1}, 0, reinterpret_cast<const std::byte*>(x.data()), bytes};
  TensorView vy{DType::kFloat32, {n}, {1}, 0, reinterpret_cast<const std::byte*>(y.data()), bytes};
  const TensorView ins[] = {vx, vy};
  auto prepared = PrepareOp(op, ins, {});
  EXPECT_TRUE(prepared.ok()) << prepared.status();
  std::vector<float> out(static_cast<size_t>(n), -1.0f);
  auto lane = d.AcquireLane();
  std::promise<absl::Status> finished;
  std::function<void(absl::Status)> done = [&](absl::Status s) { finished.set_value(s); };
  if (small) {
    const bool taken =
        d.TryRunSmall(*lane, *prepared, {vx, vy}, reinterpret_cast<std::byte*>(out.data()), done);
    EXPECT_TRUE(taken) << "a small run on an idle device was not taken";
    if (!taken) return out;
  } else {
    auto sx = d.Allocate(bytes, false, absl::InfiniteFuture(), lane.get());
    auto sy = d.Allocate(bytes, false, absl::InfiniteFuture(), lane.get());
    auto so = d.Allocate(bytes, false, absl::InfiniteFuture(), lane.get());
    EXPECT_TRUE(sx.ok() && sy.ok() && so.ok());
    EXPECT_TRUE(d.Write(*lane, **sx, 0, x.data(), bytes).ok());
    EXPECT_TRUE(d.Write(*lane, **sy, 0, y.data(), bytes).ok());
    vx.data = (*sx)->data();
    vy.data = (*sy)->data();
    d.Run(*lane, *prepared, {vx, vy}, (*so)->data(), done);
    EXPECT_TRUE(finished.get_future().get().ok());
    EXPECT_TRUE(d.Read(*lane, **so, 0, out.data(), bytes).ok());
    return out;
  }
  EXPECT_TRUE(finished.get_future().get().ok());
  return out;
}

TEST(RemoteDevice, RunsMatchTheReference) {
  runtime::DeviceOptions o;
  o.memory_budget = int64_t{1} << 30;
  o.staging_bytes = 64 << 10;
  auto d = Start(o);
  ASSERT_NE(d, nullptr);
  std::mt19937 rng(static_cast<uint32_t>(testing::TestSeed()));
  std::uniform_real_distribution<float> u(-10, 10);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{65537}, int64_t{300001}}) {
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (float& v : x) v = u(rng);
    for (float& v : y) v = u(rng);
    for (bool small : {false, true}) {
      // Small runs carry inputs and output through the staging buffer in one round trip.
      if (small && 3 * n * 4 > d->max_small_bytes()) continue;
      const std::vector<float> got = RunOn(*d, x, y, "mul", small);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[static_cast<size_t>(i)],
                  x[static_cast<size_t>(i)] * y[static_cast<size_t>(i)])
            << "n " << n << " at " << i << (small ? " (small)" : "");
      }
    }
  }
  // Every storage let go of is freed by the worker (frees go with later requests).
  EXPECT_EQ(d->memory_in_use(), 0);
}

TEST(RemoteDevice, ManyFreesGoAlongWithoutRoundTripsOfTheirOwn) {
  runtime::DeviceOptions o;
  o.memory_budget = int64_t{64} << 20;
  auto d = Start(o);
  ASSERT_NE(d, nullptr);
  auto lane = d->AcquireLane();
  // More allocations than the budget holds at once: each round's frees must reach the worker.
  for (int round = 0; round < 8; ++round) {
    std::vector<runtime::StoragePtr> held;
    for (int i = 0; i < 1000; ++i) {
      auto s = d->Allocate(16 << 10, false, absl::Now() + absl::Seconds(10), lane.get());
      ASSERT_TRUE(s.ok()) << "round " << round << ": " << s.status();
      held.push_back(*std::move(s));
    }
  }
  const float x = 1.5f;
  std::vector<float> back(1);
  auto s = d->Allocate(4, false, absl::InfiniteFuture(), lane.get());
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(d->Write(*lane, **s, 0, &x, 4).ok());
  ASSERT_TRUE(d->Read(*lane, **s, 0, back.data(), 4).ok());
  EXPECT_EQ(back[0], x);
  s->reset();
  lane.reset();
  EXPECT_EQ(d->memory_in_use(), 0);
}

TEST(RemoteDevice, AKilledWorkerFailsItsDeviceUntilTheNextOneServes) {
  runtime::DeviceOptions o;
  o.memory_budget = int64_t{1} << 30;
  auto d = Start(o);
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(d->recovers());
  const int first = d->worker_pid();
  ASSERT_GT(first, 0);
  std::vector<float> x = {1, 2, 3}, y = {4, 5, 6};
  ASSERT_EQ(RunOn(*d, x, y, "add", false)[2], 9.0f);
  ASSERT_EQ(kill(first, SIGKILL), 0);
  // The device fails (its storage with it) and a new worker takes its place after a backoff.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool failed = false;
  while (absl::Now() < deadline) {
    failed = failed || !d->health().ok();
    if (failed && d->health().ok() && d->worker_pid() != first && d->worker_pid() > 0) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(failed) << "the device never reported its worker's death";
  ASSERT_TRUE(d->health().ok()) << d->health();
  EXPECT_NE(d->worker_pid(), first);
  EXPECT_EQ(RunOn(*d, x, y, "add", false)[2], 9.0f);
}

}  // namespace
}  // namespace tc::server::worker

int main(int argc, char** argv) {
  // Started again by RemoteDevice as a device's worker: a CPU device serving the protocol.
  bool worker = false;
  int64_t budget = 0;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    worker = worker || a == "--worker_fd=3";
    if (absl::ConsumePrefix(&a, "--test_budget=")) (void)absl::SimpleAtoi(a, &budget);
  }
  if (worker) {
    tc::runtime::DeviceOptions o;
    o.memory_budget = budget;
    return tc::server::worker::WorkerMain(3, std::make_unique<tc::runtime::CpuDevice>(2, o));
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
