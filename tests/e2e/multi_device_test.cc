// Several devices in one server, against the real server binary ($TC_SERVER_BINARY,
// $TC_TEST_BACKEND as in server_test): on the CPU backend split into two devices by a
// test-only flag, on a GPU machine every GPU (skipped with fewer than two). Requests spread
// over the devices; resident tensors stay where they were put and a request whose inputs lie
// on different devices runs on one of them with the others' bytes copied there (views with
// offsets and negative strides included); a device that fails for good fails only its own
// requests, and health, ServerInfo and the KServe v2 liveness and readiness say so.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "tests/support/load_mix.h"
#include "tests/support/server_binary.h"
#include "tests/support/server_process.h"

namespace tc {
namespace {

namespace v1 = ::tensorcompute::v1;
using client::Client;
using testing::LoadMix;
using testing::LoadMixOptions;
using testing::LoadMixReport;

v1::Tensor Floats(const std::vector<float>& x, std::vector<int64_t> shape = {}) {
  v1::Tensor t;
  t.set_dtype(v1::float32);
  if (shape.empty()) shape = {static_cast<int64_t>(x.size())};
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float)));
  return t;
}

std::vector<float> Values(const v1::Tensor& t) {
  std::vector<float> out(t.data().size() / sizeof(float));
  std::memcpy(out.data(), t.data().data(), out.size() * sizeof(float));
  return out;
}

std::vector<float> Random(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-4, 4);
  std::vector<float> x(n);
  for (float& v : x) v = u(rng);
  return x;
}

v1::UploadHeader OnDevice(int device) {
  v1::UploadHeader h;
  h.set_device(device);
  return h;
}

class MultiDeviceTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> flags = {}) {
    flags.push_back(testing::BackendFlag());
    // Only the CPU backend reads it: two devices there.
    flags.push_back("--test_cpu_devices=2");
    // More, such as "--devices=0,0,--test_shared_gpu" for two devices on one GPU.
    if (const char* more = std::getenv("TC_TEST_DEVICE_FLAGS")) {
      for (const std::string& f : testing::SplitFlags(more)) flags.push_back(f);
    }
    server_ = std::make_unique<testing::ServerProcess>(testing::ServerBinary(), flags);
    ASSERT_GT(server_->port(), 0) << "server did not start";
    first_ = NewClient();
    second_ = NewClient();
    auto info = first_->ServerInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    devices_ = info->devices_size();
    shared_gpu_ = devices_ >= 2 && !info->devices(0).uuid().empty() &&
                  info->devices(0).uuid() == info->devices(1).uuid();
    workers_ = devices_ >= 1 && info->devices(0).worker_pid() != 0;
  }

  // After device 1 failed: [1, 2] kept on device 0 still computes; a request on [3, 4], kept
  // on device 1, is refused as lost with it.
  void ExpectKeptAndLost(const v1::UploadResponse& on0, const v1::UploadResponse& on1) {
    v1::Tensor t0, t1;
    t0.set_handle(on0.tensor().handle());
    t1.set_handle(on1.tensor().handle());
    auto ok = first_->Compute("neg", {t0});
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ(Values(*ok), (std::vector<float>{-1, -2}));
    auto lost = first_->Compute("add", {t0, t1});
    EXPECT_EQ(lost.status().code(), absl::StatusCode::kUnavailable) << lost.status();
    EXPECT_NE(lost.status().message().find("device 1"), absl::string_view::npos) << lost.status();
  }

  // Device 1's worker fails (as `fail` makes it) while 16 clients keep calling, cross-device
  // requests among them: only its requests fail, every result that comes back is right, and
  // a new worker takes its place without a server restart. Device 0's worker is untouched,
  // tensors it holds stay usable, those device 1 held are lost with the old worker, and
  // health stays SERVING throughout (liveness included: nothing needs a restart).
  void FailOneWorker(const std::function<void(int pid)>& fail) {
    auto on0 = first_->UploadWith(OnDevice(0), Floats({1, 2}));
    auto on1 = first_->UploadWith(OnDevice(1), Floats({3, 4}));
    ASSERT_TRUE(on0.ok() && on1.ok()) << on0.status() << " " << on1.status();
    auto before = first_->ServerInfo();
    ASSERT_TRUE(before.ok()) << before.status();
    const int pid0 = before->devices(0).worker_pid();
    const int pid1 = before->devices(1).worker_pid();
    ASSERT_GT(pid1, 0);
    ASSERT_NE(pid0, pid1);

    LoadMixOptions m;
    m.target = server_->target();
    m.clients = 16;
    m.weights[static_cast<int>(testing::LoadKind::kSmall)] = 4;
    m.weights[static_cast<int>(testing::LoadKind::kResident)] = 1;
    m.weights[static_cast<int>(testing::LoadKind::kCross)] = 1;
    m.resident_elements = int64_t{1} << 14;
    m.allowed = {absl::StatusCode::kInternal, absl::StatusCode::kUnavailable};
    LoadMix load(m);
    load.Start();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    fail(pid1);
    // Failed, then back: a new worker, the failure cleared.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    bool back = false;
    while (!back && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      auto info = first_->ServerInfo();
      ASSERT_TRUE(info.ok()) << info.status();
      back = info->devices(1).restarts() >= 1 && info->devices(1).failure().empty();
    }
    ASSERT_TRUE(back) << "device 1 did not come back";
    // Load goes on over both devices for a while: at least a second, and until a cross-device
    // call has succeeded since the new worker came (on a loaded machine, such as a sanitizer
    // build beside another build, a second can hold none).
    const int cross = static_cast<int>(testing::LoadKind::kCross);
    const int64_t cross_at_back = load.report().ok[cross];
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const auto cross_until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (load.report().ok[cross] == cross_at_back &&
           std::chrono::steady_clock::now() < cross_until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    load.Stop();
    const LoadMixReport r = load.report();
    std::printf("%s\n", r.Summary().c_str());
    EXPECT_EQ(r.unexpected, 0) << r.Summary();
    EXPECT_EQ(r.wrong, 0);
    EXPECT_GT(r.ok[cross], cross_at_back)
        << "no cross-device call succeeded after the restart: " << r.Summary();

    auto info = first_->ServerInfo();
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->devices(0).worker_pid(), pid0);
    EXPECT_EQ(info->devices(0).restarts(), 0);
    EXPECT_EQ(info->devices(0).failure(), "");
    EXPECT_NE(info->devices(1).worker_pid(), pid1);
    EXPECT_GT(info->devices(1).worker_pid(), 0);
    EXPECT_EQ(info->devices(1).restarts(), 1);
    std::printf("device 1: worker %d replaced by %d\n", pid1, info->devices(1).worker_pid());

    ExpectKeptAndLost(*on0, *on1);
    auto lost_download = first_->Download(on1->tensor().handle());
    EXPECT_EQ(lost_download.status().code(), absl::StatusCode::kUnavailable)
        << lost_download.status();
    EXPECT_TRUE(first_->Release({on1->tensor().handle()}).ok());

    // Device 1 serves again: tensors kept there, computed on, across devices too.
    std::mt19937 rng(7);
    const std::vector<float> x = Random(1000, rng), y = Random(1000, rng);
    auto a = second_->UploadWith(OnDevice(1), Floats(x));
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->device(), 1);
    auto b = second_->UploadWith(OnDevice(0), Floats(y));
    ASSERT_TRUE(b.ok()) << b.status();
    v1::Tensor ta, tb;
    ta.set_handle(a->tensor().handle());
    tb.set_handle(b->tensor().handle());
    for (const auto& inputs : {std::vector<v1::Tensor>{ta, ta}, std::vector<v1::Tensor>{ta, tb}}) {
      auto sum = second_->Compute("add", inputs);
      ASSERT_TRUE(sum.ok()) << sum.status();
      const std::vector<float> got = Values(*sum);
      ASSERT_EQ(got.size(), x.size());
      const bool twice = inputs[1].handle() == ta.handle();
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(got[i], x[i] + (twice ? x[i] : y[i])) << "at " << i;
      }
    }

    auto server = first_->Health();
    auto service = first_->Health(v1::TensorService::service_full_name());
    ASSERT_TRUE(server.ok() && service.ok());
    EXPECT_EQ(*server, "SERVING");
    EXPECT_EQ(*service, "SERVING");
    auto stub = inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    inference::ServerLiveResponse live;
    ASSERT_TRUE(stub->ServerLive(&ctx, {}, &live).ok());
    EXPECT_TRUE(live.live());
    const int status = server_->Terminate(25);
    ASSERT_TRUE(WIFEXITED(status)) << "no clean exit after the fault: " << status;
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }

  std::unique_ptr<Client> NewClient() {
    client::ClientOptions o;
    o.timeout = absl::Seconds(20);
    // Each request on one connection, so that nothing is spread over resident parts.
    o.connections = 1;
    return std::make_unique<Client>(server_->target(), o);
  }

  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<Client> first_, second_;
  int devices_ = 0;
  // Devices 0 and 1 are one GPU (--test_shared_gpu): a fault on one fails both.
  bool shared_gpu_ = false;
  // Each device computes in a worker process of its own (--device_workers).
  bool workers_ = false;
};

#define SKIP_WITH_ONE_DEVICE() \
  if (devices_ < 2) GTEST_SKIP() << "the server has " << devices_ << " device(s)"
#define SKIP_WITHOUT_WORKERS() \
  if (!workers_) GTEST_SKIP() << "devices compute in the server's process (no --device_workers)"

TEST_F(MultiDeviceTest, ListsEveryDeviceAndSpreadsRequests) {
  Start();
  SKIP_WITH_ONE_DEVICE();
  // One client, one call at a time: never two in flight, and still both devices serve.
  for (int i = 0; i < 40; ++i) {
    auto r = first_->Compute("neg", {Floats({1.0f * i})});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(Values(*r), std::vector<float>{-1.0f * i});
  }
  auto info = first_->ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  int64_t total = 0;
  for (const auto& d : info->devices()) {
    std::printf("device %d (%s): %lld requests\n", d.index(), d.kind().c_str(),
                static_cast<long long>(d.requests_total()));
    EXPECT_GE(d.requests_total(), 10) << "device " << d.index() << " served too few";
    EXPECT_EQ(d.failure(), "");
    total += d.requests_total();
  }
  EXPECT_GE(total, 40);
}

TEST_F(MultiDeviceTest, OneClientsTensorsShareADeviceAndTwoClientsSpread) {
  Start();
  SKIP_WITH_ONE_DEVICE();
  auto a = first_->Upload(Floats({1, 2, 3}));
  auto b = first_->Upload(Floats({4, 5, 6}));
  auto c = second_->Upload(Floats({7, 8, 9}));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->device(), b->device()) << "one client's tensors went to two devices";
  EXPECT_NE(a->device(), c->device()) << "a second client's went to the same device";
}

// Inputs resident on two devices, as whole tensors and as views (offset, negative and zero
// strides): the request runs on one and copies the other's bytes there.
TEST_F(MultiDeviceTest, InputsOnDifferentDevicesCompute) {
  Start();
  SKIP_WITH_ONE_DEVICE();
  std::mt19937 rng(std::random_device{}());
  for (int64_t n : {1, 7, 1000, 65537, 1 << 20}) {
    SCOPED_TRACE(n);
    const std::vector<float> x = Random(n, rng), y = Random(n + 3, rng);
    auto a = first_->Upload(Floats(x));
    auto b = second_->Upload(Floats(y));
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
    ASSERT_NE(a->device(), b->device());
    // Whole x plus y reversed from its last element, skipping its first 3: y[n+2-i].
    v1::Tensor va, vb;
    va.set_handle(a->tensor().handle());
    vb.set_handle(b->tensor().handle());
    vb.set_dtype(v1::float32);
    vb.add_shape(n);
    vb.add_strides(-1);
    vb.set_offset(n + 2);
    for (Client* c : {first_.get(), second_.get()}) {
      auto r = c->Compute("add", {va, vb});
      ASSERT_TRUE(r.ok()) << r.status();
      const std::vector<float> got = Values(*r);
      ASSERT_EQ(got.size(), static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i], x[i] + y[n + 2 - i]) << "element " << i;
      }
    }
    // Broadcast: a column of the other device's tensor (stride 0 across the row).
    v1::Tensor col;
    col.set_handle(b->tensor().handle());
    col.set_dtype(v1::float32);
    col.add_shape(2);
    col.add_shape(n);
    col.add_strides(1);
    col.add_strides(0);
    col.set_offset(1);
    v1::Tensor row;
    row.set_handle(a->tensor().handle());
    auto r = first_->Compute("mul", {row, col});
    ASSERT_TRUE(r.ok()) << r.status();
    const std::vector<float> got = Values(*r);
    ASSERT_EQ(got.size(), static_cast<size_t>(2 * n));
    for (int64_t i = 0; i < 2 * n; ++i) {
      ASSERT_EQ(got[i], x[i % n] * y[1 + i / n]) << "element " << i;
    }
  }
  // The output kept on the server lands with the inputs' device and reads back right.
  auto a = first_->Upload(Floats({1, 2}));
  auto b = second_->Upload(Floats({10, 20}));
  ASSERT_TRUE(a.ok() && b.ok());
  v1::ComputeRequest req;
  req.set_op("sub");
  req.add_inputs()->set_handle(a->tensor().handle());
  req.add_inputs()->set_handle(b->tensor().handle());
  req.set_keep_output_resident(true);
  auto kept = first_->Compute(req);
  ASSERT_TRUE(kept.ok()) << kept.status();
  auto down = second_->Download(kept->handle());
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(Values(*down), (std::vector<float>{-9, -18}));
}

TEST_F(MultiDeviceTest, UploadToANamedDevice) {
  Start();
  SKIP_WITH_ONE_DEVICE();
  auto info = first_->ServerInfo();
  ASSERT_TRUE(info.ok());
  for (const auto& d : info->devices()) {
    auto up = first_->UploadWith(OnDevice(d.index()), Floats({1, 2, 3}));
    ASSERT_TRUE(up.ok()) << up.status();
    EXPECT_EQ(up->device(), d.index());
  }
  auto bad = first_->UploadWith(OnDevice(99), Floats({1}));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_NE(bad.status().message().find("no device 99"), absl::string_view::npos) << bad.status();
}

// Device 1 fails for good at its 150th run while 16 clients keep calling: only its requests
// fail (INTERNAL in flight, UNAVAILABLE after), device 0 keeps serving, tensors resident on it
// stay usable and those on device 1 are refused with the reason; the server's health turns
// NOT_SERVING (restart it) while its services stay SERVING (keep sending traffic), and the
// KServe v2 liveness and readiness agree.
TEST_F(MultiDeviceTest, OneDeviceFailingFailsOnlyItsRequests) {
  Start({"--test_inject_device_fault_at_run=150", "--test_inject_device_fault_devices=1"});
  SKIP_WITH_ONE_DEVICE();
  if (shared_gpu_) GTEST_SKIP() << "devices 0 and 1 share one GPU";
  if (workers_) GTEST_SKIP() << "with a worker per device: AFaultingWorkerFailsAloneAndIsReplaced";
  auto on0 = first_->UploadWith(OnDevice(0), Floats({1, 2}));
  auto on1 = first_->UploadWith(OnDevice(1), Floats({3, 4}));
  ASSERT_TRUE(on0.ok() && on1.ok()) << on0.status() << " " << on1.status();

  LoadMixOptions m;
  m.target = server_->target();
  m.clients = 16;
  m.weights[static_cast<int>(testing::LoadKind::kSmall)] = 4;
  m.weights[static_cast<int>(testing::LoadKind::kResident)] = 1;
  m.resident_elements = int64_t{1} << 14;
  m.allowed = {absl::StatusCode::kInternal, absl::StatusCode::kUnavailable};
  LoadMix load(m);
  load.Start();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool failed = false;
  while (!failed && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto info = first_->ServerInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    failed = !info->devices(1).failure().empty();
  }
  ASSERT_TRUE(failed) << "device 1 did not fail";
  // Load goes on beside the failed device for a while.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  load.Stop();
  const LoadMixReport r = load.report();
  std::printf("%s\n", r.Summary().c_str());
  EXPECT_EQ(r.unexpected, 0) << r.Summary();
  EXPECT_EQ(r.wrong, 0);

  auto info = first_->ServerInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->devices(0).failure(), "");
  EXPECT_NE(info->devices(1).failure(), "");
  std::printf("device 1: %s\n", info->devices(1).failure().c_str());

  // New requests all succeed: they go to device 0.
  for (int i = 0; i < 30; ++i) {
    auto c = first_->Compute("neg", {Floats({2.0f * i})});
    ASSERT_TRUE(c.ok()) << "request " << i << ": " << c.status();
    EXPECT_EQ(Values(*c), std::vector<float>{-2.0f * i});
  }
  ExpectKeptAndLost(*on0, *on1);
  // New tensors go to the device that works.
  auto fresh = second_->Upload(Floats({5}));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->device(), 0);

  auto server = first_->Health();
  auto service = first_->Health(v1::TensorService::service_full_name());
  auto v2service = first_->Health("inference.GRPCInferenceService");
  ASSERT_TRUE(server.ok() && service.ok() && v2service.ok());
  EXPECT_EQ(*server, "NOT_SERVING");
  EXPECT_EQ(*service, "SERVING");
  EXPECT_EQ(*v2service, "SERVING");
  auto stub = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    inference::ServerLiveResponse live;
    ASSERT_TRUE(stub->ServerLive(&ctx, {}, &live).ok());
    EXPECT_FALSE(live.live());
  }
  {
    grpc::ClientContext ctx;
    inference::ServerReadyResponse ready;
    ASSERT_TRUE(stub->ServerReady(&ctx, {}, &ready).ok());
    EXPECT_TRUE(ready.ready());
  }
  const int status = server_->Terminate(25);
  ASSERT_TRUE(WIFEXITED(status)) << "no clean exit after the fault: " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// With a worker process per device (--device_workers): device 1 faults at its 150th run.
TEST_F(MultiDeviceTest, AFaultingWorkerFailsAloneAndIsReplaced) {
  Start({"--test_inject_device_fault_at_run=150", "--test_inject_device_fault_devices=1"});
  SKIP_WITH_ONE_DEVICE();
  SKIP_WITHOUT_WORKERS();
  FailOneWorker([](int) {});
}

// With a worker process per device: device 1's worker is killed outright.
TEST_F(MultiDeviceTest, AKilledWorkerFailsAloneAndIsReplaced) {
  Start();
  SKIP_WITH_ONE_DEVICE();
  SKIP_WITHOUT_WORKERS();
  FailOneWorker([](int pid) { ASSERT_EQ(kill(pid, SIGKILL), 0); });
}

// A worker is told of frees along with later requests, some at a time: tens of thousands let
// go at once (more than one message holds) leave it serving, its tensors intact.
TEST_F(MultiDeviceTest, ManyTensorsLetGoAtOnceLeaveTheWorkerServing) {
  Start({"--resident_max_tensors=50000"});
  SKIP_WITHOUT_WORKERS();
  auto keep = first_->UploadWith(OnDevice(0), Floats({1, 2, 3}));
  ASSERT_TRUE(keep.ok()) << keep.status();
  // Frees of more than two requests' worth (a request carries at most 4096).
  constexpr int kTensors = 10000;
  std::vector<std::string> handles;
  for (int i = 0; i < kTensors; ++i) {
    auto up = first_->UploadWith(OnDevice(0), Floats({static_cast<float>(i)}));
    ASSERT_TRUE(up.ok()) << "tensor " << i << ": " << up.status();
    handles.push_back(up->tensor().handle());
  }
  ASSERT_TRUE(first_->Release(handles).ok());
  v1::Tensor t;
  t.set_handle(keep->tensor().handle());
  for (int round = 0; round < 20; ++round) {
    auto r = first_->Compute("add", {t, t});
    ASSERT_TRUE(r.ok()) << "round " << round << ": " << r.status();
    EXPECT_EQ(Values(*r), (std::vector<float>{2, 4, 6}));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto info = first_->ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->devices(0).restarts(), 0);
}

// Bytes copied from one worker's device to another's stay mapped in the importer from one
// request to the next; a tensor let go of must still be freed (after the importer let go of
// it) and a new tensor at the same place read fresh. Each round makes a new tensor on
// device 0 and adds it to one kept on device 1, where the request runs (it holds more of the
// bytes): a stale mapping would give the last round's values, a free never done would run
// device 0 out of its budget within a few rounds.
TEST_F(MultiDeviceTest, CopiesBetweenWorkersFreeWhatTheyCopiedFrom) {
  constexpr int64_t kN = int64_t{1} << 20;  // 4 MiB of float32.
  Start({"--memory_budget=" + std::to_string(int64_t{24} << 20)});
  SKIP_WITH_ONE_DEVICE();
  SKIP_WITHOUT_WORKERS();
  std::mt19937 rng(std::random_device{}());
  const std::vector<float> x = Random(kN, rng), y = Random(2 * kN, rng);
  auto base = first_->UploadWith(OnDevice(0), Floats(x));
  auto kept = first_->UploadWith(OnDevice(1), Floats(y, {2, kN}));
  ASSERT_TRUE(base.ok() && kept.ok()) << base.status() << " " << kept.status();
  v1::Tensor on1;
  on1.set_handle(kept->tensor().handle());
  constexpr int kRounds = 12;  // 48 MiB made on device 0 in all, its budget 24.
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(round);
    // x + round, made on device 0 and kept there.
    auto scalar = first_->UploadWith(OnDevice(0), Floats({static_cast<float>(round)}));
    ASSERT_TRUE(scalar.ok()) << scalar.status();
    v1::ComputeRequest make;
    make.set_op("add");
    make.add_inputs()->set_handle(base->tensor().handle());
    v1::Tensor* s = make.add_inputs();
    s->set_handle(scalar->tensor().handle());
    s->set_dtype(v1::float32);
    s->add_shape(kN);
    s->add_strides(0);
    make.set_keep_output_resident(true);
    auto made = first_->Compute(make);
    ASSERT_TRUE(made.ok()) << made.status();
    // Used twice from device 1, as a row broadcast over its two rows.
    v1::Tensor row;
    row.set_handle(made->handle());
    row.set_dtype(v1::float32);
    row.add_shape(2);
    row.add_shape(kN);
    row.add_strides(0);
    row.add_strides(1);
    for (int use = 0; use < 2; ++use) {
      auto sum = first_->Compute("add", {row, on1});
      ASSERT_TRUE(sum.ok()) << sum.status();
      const std::vector<float> got = Values(*sum);
      ASSERT_EQ(got.size(), static_cast<size_t>(2 * kN));
      for (int64_t i = 0; i < 2 * kN; i += 4099) {
        ASSERT_EQ(got[i], (x[i % kN] + static_cast<float>(round)) + y[i]) << "element " << i;
      }
      ASSERT_EQ(got.back(), (x.back() + static_cast<float>(round)) + y.back());
    }
    ASSERT_TRUE(first_->Release({made->handle(), scalar->tensor().handle()}).ok());
  }
  auto info = first_->ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->devices(0).restarts(), 0);
  EXPECT_EQ(info->devices(1).restarts(), 0);
}

}  // namespace
}  // namespace tc
