// Faults under load, against the real server binary ($TC_SERVER_BINARY, $TC_TEST_BACKEND as in
// server_test): clients cancelling streams half way, deadlines expiring while requests run,
// SIGTERM while 16 clients keep calling, and a device that fails for good (injected with a
// test-only flag: a trapping kernel on a GPU). Each runs beside a mixed load whose every
// result is checked; afterwards device memory, resident tensors and the process's RSS must be
// back at the baseline taken after a warm-up with the same mix.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/support/load_mix.h"
#include "tests/support/server_binary.h"
#include "tests/support/server_process.h"

namespace tc {
namespace {

using client::Client;
using testing::Footprint;
using testing::LoadMix;
using testing::LoadMixOptions;
using testing::LoadMixReport;
using testing::ServerFootprint;

constexpr int kClients = 16;

class FaultTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> flags = {}) {
    flags.push_back(testing::BackendFlag());
    server_ = std::make_unique<testing::ServerProcess>(testing::ServerBinary(), flags);
    ASSERT_GT(server_->port(), 0) << "server did not start";
    client::ClientOptions o;
    o.timeout = absl::Seconds(10);
    client_ = std::make_unique<Client>(server_->target(), o);
  }

  LoadMixOptions Mix(std::initializer_list<int> weights) {
    LoadMixOptions m;
    m.target = server_->target();
    m.clients = kClients;
    int k = 0;
    for (int w : weights) m.weights[k++] = w;
    // 2 MiB per streamed input: several chunks, quick on two cores.
    m.streamed_elements = int64_t{1} << 19;
    m.resident_elements = int64_t{1} << 17;
    return m;
  }

  // The same mix without the fault, a fixed number of calls, so that allocator arenas,
  // thread stacks and caches have grown before the baseline is taken.
  ServerFootprint WarmUp(LoadMixOptions m) {
    m.weights[static_cast<int>(testing::LoadKind::kCancel)] = 0;
    m.weights[static_cast<int>(testing::LoadKind::kDeadline)] = 0;
    m.calls_per_client = 40;
    LoadMix warm(m);
    warm.Start();
    warm.Wait();
    const LoadMixReport r = warm.report();
    EXPECT_EQ(r.unexpected, 0) << r.Summary();
    // A call's reply reaches its client before the server has freed that call's buffers: the
    // baseline waits (up to 10 s) for the device memory and resident tensors of the warm-up
    // to be let go of, so it is not taken with the last calls' bytes still counted.
    ServerFootprint idle = Footprint(server_->target(), server_->pid());
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((idle.device_bytes != 0 || idle.resident_tensors != 0) &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      idle = Footprint(server_->target(), server_->pid());
    }
    return idle;
  }

  LoadMixReport RunFor(const LoadMixOptions& m, absl::Duration d) {
    LoadMix load(m);
    load.Start();
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(d));
    load.Stop();
    return load.report();
  }

  // Device memory and resident tensors exactly as before, RSS within a quarter (at least
  // 64 MiB) of it: freed heap is not always handed back to the kernel at once.
  void ExpectBackToBaseline(const ServerFootprint& base) {
    ServerFootprint now;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    const int64_t rss_slack = std::max<int64_t>(base.rss_kb / 4, 64 << 10);
    do {
      now = Footprint(server_->target(), server_->pid());
      if (now.device_bytes == base.device_bytes && now.resident_tensors == base.resident_tensors &&
          now.rss_kb <= base.rss_kb + rss_slack) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (std::chrono::steady_clock::now() < until);
    std::printf("baseline: %s\nafter:    %s\n", base.ToString().c_str(), now.ToString().c_str());
    EXPECT_EQ(now.device_bytes, base.device_bytes);
    EXPECT_EQ(now.resident_tensors, base.resident_tensors);
    EXPECT_LE(now.rss_kb, base.rss_kb + rss_slack) << "RSS grew from " << base.rss_kb << " kB";
  }

  void ExpectHealth(const std::string& want) {
    auto h = client_->Health();
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(*h, want);
  }

  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(FaultTest, ClientsCancellingMidStreamUnderLoad) {
  Start();
  LoadMixOptions m = Mix({4, 1, 1, 4, 0});
  const ServerFootprint base = WarmUp(m);
  const LoadMixReport r = RunFor(m, absl::Seconds(4));
  std::printf("%s\n", r.Summary().c_str());
  EXPECT_EQ(r.unexpected, 0) << r.Summary();
  EXPECT_EQ(r.wrong, 0);
  EXPECT_GT(r.failed[static_cast<int>(testing::LoadKind::kCancel)], 0);
  EXPECT_GT(r.ok[static_cast<int>(testing::LoadKind::kStreamed)], 0);
  ExpectBackToBaseline(base);
  ExpectHealth("SERVING");
}

TEST_F(FaultTest, DeadlinesExpiringMidComputeUnderLoad) {
  Start();
  LoadMixOptions m = Mix({4, 1, 1, 0, 4});
  m.short_deadline = absl::Milliseconds(50);
  const ServerFootprint base = WarmUp(m);
  const LoadMixReport r = RunFor(m, absl::Seconds(4));
  std::printf("%s\n", r.Summary().c_str());
  EXPECT_EQ(r.unexpected, 0) << r.Summary();
  EXPECT_EQ(r.wrong, 0);
  EXPECT_GT(r.with(absl::StatusCode::kDeadlineExceeded), 0) << r.Summary();
  ExpectBackToBaseline(base);
  ExpectHealth("SERVING");
}

// In-flight calls finish, new ones get UNAVAILABLE (or, for calls that arrive while gRPC's
// Shutdown runs, its own CANCELLED), nothing else; the process exits 0 within the grace
// period.
TEST_F(FaultTest, SigtermUnderLoad) {
  Start({"--shutdown_grace_seconds=20"});
  LoadMixOptions m = Mix({4, 1, 1, 0, 0});
  m.allowed = {absl::StatusCode::kUnavailable};
  LoadMix load(m);
  load.Start();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const LoadMixReport before = load.report();
  // A call surely in flight at the signal: a streamed add of two 4 MiB inputs whose header and
  // first halves are sent before it and second halves after. The server cannot finish it
  // before the rest comes, so the wait before the signal only makes its arrival surer.
  constexpr int64_t kElements = int64_t{1} << 20;
  constexpr int64_t kHalf = kElements / 2 * 4;
  auto stub = tensorcompute::v1::TensorService::NewStub(
      grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext slow_ctx;
  slow_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto slow = stub->ComputeStream(&slow_ctx);
  {
    tensorcompute::v1::ComputeStreamRequest header;
    header.mutable_header()->set_op("add");
    for (int i = 0; i < 2; ++i) {
      tensorcompute::v1::Tensor* t = header.mutable_header()->add_inputs();
      t->set_dtype(tensorcompute::v1::float32);
      t->add_shape(kElements);
      t->set_storage_bytes(kElements * 4);
    }
    ASSERT_TRUE(slow->Write(header));
  }
  // Input i holds i + 1 everywhere.
  auto send_half = [&](int input, int64_t offset) {
    const std::vector<float> values(static_cast<size_t>(kHalf / 4), static_cast<float>(input + 1));
    tensorcompute::v1::ComputeStreamRequest m;
    m.mutable_chunk()->set_tensor(input);
    m.mutable_chunk()->set_offset(offset);
    m.mutable_chunk()->set_data(values.data(), static_cast<size_t>(kHalf));
    return slow->Write(m);
  };
  ASSERT_TRUE(send_half(0, 0));
  ASSERT_TRUE(send_half(1, 0));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Calls that start about when the signal goes may meet gRPC's Shutdown (see LoadMix). In
  // the sanitizer build on two loaded cores a small call begun more than 20 ms before the
  // signal reached the server only after Shutdown began (its bare CANCELLED, while the
  // server's own count had every call in flight finished): 100 ms.
  load.MarkShutdown(absl::Now(), absl::Milliseconds(100));
  const auto signalled = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(server_->pid(), SIGTERM), 0);
  // The rest of the call in flight, after the signal; its result, whole.
  EXPECT_TRUE(send_half(0, kHalf));
  EXPECT_TRUE(send_half(1, kHalf));
  slow->WritesDone();
  int64_t result_bytes = 0, wrong_values = 0;
  for (tensorcompute::v1::TensorStreamMessage m; slow->Read(&m);) {
    // The output's bytes: in chunks after its header, or inline in a small one's header.
    const std::string& data = m.has_chunk() ? m.chunk().data() : m.header().data();
    if (data.empty()) continue;
    result_bytes += static_cast<int64_t>(data.size());
    std::vector<float> values(data.size() / 4);
    std::memcpy(values.data(), data.data(), values.size() * 4);
    for (float v : values) wrong_values += v != 3.0f;
  }
  const grpc::Status slow_status = slow->Finish();
  const int status = server_->WaitExit(25);
  const auto exited = std::chrono::steady_clock::now();
  // Clients keep calling a little after the exit: refused, not hung.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  load.Stop();
  const LoadMixReport r = load.report();
  std::printf("%s\nexit after %.2f s\n", r.Summary().c_str(),
              std::chrono::duration<double>(exited - signalled).count());
  ASSERT_TRUE(WIFEXITED(status)) << "server did not exit within 25 s: " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_LT(exited - signalled, std::chrono::seconds(20));
  EXPECT_GT(before.total_ok(), 0);
  EXPECT_EQ(r.unexpected, 0) << r.Summary();
  EXPECT_EQ(r.wrong, 0);
  EXPECT_GT(r.with(absl::StatusCode::kUnavailable), 0) << r.Summary();
  // In flight at the signal, and finished: the drain let it.
  ASSERT_TRUE(slow_status.ok()) << slow_status.error_message();
  EXPECT_EQ(result_bytes, kElements * 4);
  EXPECT_EQ(wrong_values, 0);
}

// The device fails for good at its 600th run: the requests on it fail with INTERNAL, later
// ones with UNAVAILABLE, health turns NOT_SERVING, the process stays up (health and server
// info still answer), memory comes back as requests end and handles are released, and
// SIGTERM still stops it cleanly.
TEST_F(FaultTest, InjectedDeviceFaultUnderLoad) {
  Start({"--test_inject_device_fault_at_run=600"});
  LoadMixOptions m = Mix({4, 1, 1, 0, 0});
  // 16 clients x 20 calls: under 600 runs.
  m.calls_per_client = 20;
  {
    LoadMix warm(m);
    warm.Start();
    warm.Wait();
    ASSERT_EQ(warm.report().unexpected, 0) << warm.report().Summary();
  }
  const ServerFootprint base = Footprint(server_->target(), server_->pid());
  ExpectHealth("SERVING");
  auto before = client_->ServerInfo();
  ASSERT_TRUE(before.ok()) << before.status();
  // With a worker process per device ($TC_TEST_SERVER_FLAGS=--device_workers) the device
  // comes back instead, in a new worker.
  const bool workers = before->devices(0).worker_pid() != 0;

  m.calls_per_client = 0;
  m.allowed = {absl::StatusCode::kInternal, absl::StatusCode::kUnavailable};
  LoadMix load(m);
  load.Start();
  if (workers) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int64_t restarts = 0;
    while (restarts < 1 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      auto info = client_->ServerInfo();
      ASSERT_TRUE(info.ok()) << info.status();
      restarts = info->devices(0).failure().empty() ? info->devices(0).restarts() : 0;
    }
    ASSERT_EQ(restarts, 1) << "the device did not come back";
    std::this_thread::sleep_for(std::chrono::seconds(1));
    load.Stop();
    const LoadMixReport r = load.report();
    std::printf("%s\n", r.Summary().c_str());
    EXPECT_EQ(r.unexpected, 0) << r.Summary();
    EXPECT_EQ(r.wrong, 0);
    EXPECT_GT(r.with(absl::StatusCode::kUnavailable) + r.with(absl::StatusCode::kInternal), 0)
        << r.Summary();
    ExpectHealth("SERVING");
    tensorcompute::v1::Tensor t;
    t.set_dtype(tensorcompute::v1::float32);
    const float one = 1.0f;
    t.set_data(std::string(reinterpret_cast<const char*>(&one), 4));
    auto served = client_->Compute("neg", {t});
    ASSERT_TRUE(served.ok()) << served.status();
    ASSERT_EQ(served->data().size(), 4u);
    float got = 0;
    std::memcpy(&got, served->data().data(), 4);
    EXPECT_EQ(got, -1.0f);
    ExpectBackToBaseline(base);
    const int status = server_->Terminate(25);
    ASSERT_TRUE(WIFEXITED(status)) << "no clean exit after the fault: " << status;
    EXPECT_EQ(WEXITSTATUS(status), 0);
    return;
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string health = "SERVING";
  while (health == "SERVING" && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto h = client_->Health();
    ASSERT_TRUE(h.ok()) << h.status();
    health = *h;
  }
  // Load goes on against the failed device for a while.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  load.Stop();
  const LoadMixReport r = load.report();
  std::printf("%s\n", r.Summary().c_str());
  EXPECT_EQ(health, "NOT_SERVING");
  EXPECT_EQ(r.unexpected, 0) << r.Summary();
  EXPECT_EQ(r.wrong, 0);
  EXPECT_GT(r.with(absl::StatusCode::kUnavailable), 0) << r.Summary();
  auto info = client_->ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_GT(info->devices_size(), 0);
  EXPECT_NE(info->devices(0).failure(), "");
  std::printf("device 0: %s\n", info->devices(0).failure().c_str());
  // New calls are refused with the reason.
  auto refused = client_->Compute("neg", {[] {
                                    tensorcompute::v1::Tensor t;
                                    t.set_dtype(tensorcompute::v1::float32);
                                    t.set_data(std::string(4, '\0'));
                                    return t;
                                  }()});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_NE(refused.status().message().find("failed"), absl::string_view::npos);
  ExpectBackToBaseline(base);
  ExpectHealth("NOT_SERVING");
  const auto signalled = std::chrono::steady_clock::now();
  const int status = server_->Terminate(25);
  ASSERT_TRUE(WIFEXITED(status)) << "no clean exit after the fault: " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, std::chrono::seconds(20));
}

}  // namespace
}  // namespace tc
