// ComputeJob on its own, over a CPU device: decoding and checking a request's inputs (inline,
// streamed, resident), planning with the device's tile rule, streamed chunks, and running.
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "runtime/cpu_device.h"
#include "server/pipeline/job.h"
#include "server/v1/decode.h"

namespace tc::server {
namespace {

v1::Tensor Floats(const std::vector<float>& values, std::vector<int64_t> shape,
                  std::vector<int64_t> strides = {}) {
  v1::Tensor t;
  t.set_dtype(v1::float32);
  for (int64_t d : shape) t.add_shape(d);
  for (int64_t s : strides) t.add_strides(s);
  t.set_data(values.data(), values.size() * sizeof(float));
  return t;
}

class JobTest : public ::testing::Test {
 protected:
  JobTest() {
    std::vector<std::unique_ptr<runtime::Device>> d;
    d.push_back(std::make_unique<runtime::CpuDevice>(1, runtime::DeviceOptions{}));
    devices_ = std::make_unique<runtime::DeviceSet>(std::move(d));
    env_ = ServiceEnv{devices_.get(), &pool_,  &resident_, nullptr,
                      &metrics_,      nullptr, options_,   &life_};
  }

  // `r` decoded as the v1 front door decodes it, then prepared; the spec is kept for the
  // test's life (the job's inline inputs point into it and into `r`).
  absl::StatusOr<std::unique_ptr<ComputeJob>> Prepare(const v1::ComputeRequest& r,
                                                      bool allow_streamed = false,
                                                      const std::string& owner = "alice") {
    auto spec = DecodeCompute(r, allow_streamed, env_.options);
    if (!spec.ok()) return spec.status();
    specs_.push_back(*std::move(spec));
    return ComputeJob::Prepare(specs_.back(), owner, env_, absl::InfiniteFuture());
  }

  // Runs the job into new output storage; returns the output's floats.
  std::vector<float> Run(ComputeJob& job) {
    auto out = job.AllocateOutput(absl::InfiniteFuture());
    EXPECT_TRUE(out.ok()) << out.status();
    std::promise<absl::Status> finished;
    job.Run((*out)->data(), [&finished](absl::Status s) { finished.set_value(std::move(s)); });
    EXPECT_TRUE(finished.get_future().get().ok());
    std::vector<float> result(static_cast<size_t>(job.plan().out_storage_bytes / 4));
    std::memcpy(result.data(), (*out)->data(), result.size() * 4);
    return result;
  }

  ServiceOptions options_;
  ThreadPool pool_{1};
  // Before the store: resident tensors hold storage of these devices.
  std::unique_ptr<runtime::DeviceSet> devices_;
  ResidentStore resident_{ResidentOptions{}};
  Metrics metrics_;
  Lifecycle life_;
  ServiceEnv env_{};
  std::deque<ComputeSpec> specs_;
};

TEST_F(JobTest, InlineInputsPlannedWithTheDevicesTileRuleAndRun) {
  // b is the transpose of a 3 x 2 float32 matrix; a is contiguous 2 x 3.
  v1::ComputeRequest r;
  r.set_op("add");
  *r.add_inputs() = Floats({1, 2, 3, 4, 5, 6}, {2, 3});
  *r.add_inputs() = Floats({10, 20, 30, 40, 50, 60}, {2, 3}, {1, 2});
  auto job = Prepare(r);
  ASSERT_TRUE(job.ok()) << job.status();
  // The CPU device's rule tiles every permuted plan, small dims included.
  EXPECT_EQ(KernelName((*job)->plan().kernel), KernelName(Kernel::kTiles));
  EXPECT_EQ(Run(**job), (std::vector<float>{11, 32, 53, 24, 45, 66}));
}

TEST_F(JobTest, StreamedInputsTakeChunksInOrder) {
  v1::ComputeRequest r;
  r.set_op("mul");
  v1::Tensor* a = r.add_inputs();
  a->set_dtype(v1::float32);
  a->add_shape(4);
  a->set_storage_bytes(16);
  *r.add_inputs() = Floats({2, 2, 2, 2}, {4});
  EXPECT_EQ(Prepare(r).status().code(), absl::StatusCode::kInvalidArgument);  // not a stream
  auto job = Prepare(r, /*allow_streamed=*/true);
  ASSERT_TRUE(job.ok()) << job.status();
  const float values[] = {1, 2, 3, 4};
  const absl::string_view first(reinterpret_cast<const char*>(values), 8);
  const absl::string_view late(reinterpret_cast<const char*>(values + 2), 8);
  EXPECT_EQ((*job)->AcceptChunk(0, 8, late).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*job)->CheckComplete().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*job)->AcceptChunk(0, 0, first).ok());
  ASSERT_TRUE((*job)->AcceptChunk(0, 8, late).ok());
  EXPECT_TRUE((*job)->CheckComplete().ok());
  EXPECT_EQ((*job)->bytes_received(), 16);
  EXPECT_EQ(Run(**job), (std::vector<float>{2, 4, 6, 8}));
}

TEST_F(JobTest, ResidentInputsBelongToTheirOwner) {
  auto storage = devices_->at(0).Allocate(16, true, absl::InfiniteFuture());
  ASSERT_TRUE(storage.ok());
  const float values[] = {1, 2, 3, 4};
  std::memcpy((*storage)->data(), values, 16);
  auto kept =
      resident_.Add("alice", *storage, TensorView{DType::kFloat32, {4}, {1}, 0, nullptr, 16}, 0);
  ASSERT_TRUE(kept.ok());
  v1::ComputeRequest r;
  r.set_op("neg");
  r.add_inputs()->set_handle((*kept)->handle);
  auto job = Prepare(r);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(Run(**job), (std::vector<float>{-1, -2, -3, -4}));
  EXPECT_EQ(Prepare(r, false, "bob").status().code(), absl::StatusCode::kNotFound);
  r.mutable_inputs(0)->set_data(std::string(16, '\0'));
  EXPECT_EQ(Prepare(r).status().code(), absl::StatusCode::kInvalidArgument);  // handle and data
}

TEST_F(JobTest, BadRequestsGetTheirStatus) {
  v1::ComputeRequest r;
  r.set_op("no_such_op");
  *r.add_inputs() = Floats({1}, {2});  // also wrong: 2 elements in 4 bytes
  auto unknown = Prepare(r);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("unknown op 'no_such_op'"), std::string::npos)
      << unknown.status();
  r.set_op("neg");
  auto outside = Prepare(r);
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(outside.status().message().find("input 0"), std::string::npos) << outside.status();
  // Over the request limit.
  env_.options.max_request_bytes = 8;
  *r.mutable_inputs(0) = Floats({1, 2, 3}, {3});
  EXPECT_EQ(Prepare(r).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace tc::server
