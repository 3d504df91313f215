// tensorcompute-server: the gRPC process. Flags (flags.h), devices (devices.h), credentials
// and tokens (security.h) and gauges (gauges.h) are made here, the services started, and a
// signal drains them.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/calls/unserved.h"
#include "server/data/mapped_bytes.h"
#include "server/data/region_socket.h"
#include "server/data/resident.h"
#include "server/kserve/inference_service.h"
#include "server/process/devices.h"
#include "server/process/flags.h"
#include "server/process/gauges.h"
#include "server/env/log.h"
#include "server/env/memory_release.h"
#include "server/env/metrics.h"
#include "server/process/security.h"
#include "server/v1/service.h"
#include "util/name_values.h"
#include "server/worker/worker.h"
#include "server/pipeline/host_buffers.h"
#include "util/thread_pool.h"

namespace {

using tc::server::Fail;
using tc::server::Log;

// The machine's memory, or the container's limit where that is lower (cgroup v2, then v1).
int64_t MachineMemory() {
  int64_t bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream f(path);
    int64_t limit = 0;
    if (f >> limit && limit > 0 && limit < bytes) bytes = limit;
  }
  return bytes;
}

// 16 random bytes in hex: this process among every server that was or will be on its address.
std::string InstanceId() {
  std::random_device random;
  std::string out;
  for (int i = 0; i < 4; ++i) out += absl::StrCat(absl::Hex(random(), absl::kZeroPad8));
  return out;
}

// Descriptors: the region socket's connections and tickets hold some each, besides gRPC's.
void RaiseDescriptorLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &r);
  }
}

}  // namespace

// How long gRPC's Shutdown may take once calls are cancelled, before the process exits anyway.
constexpr int kShutdownBoundSeconds = 3;

// Whether a sanitizer's exit-time checks (LeakSanitizer's) are to run: GCC says so by macro,
// clang by __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TC_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TC_SANITIZED 1
#endif
#endif
#ifndef TC_SANITIZED
#define TC_SANITIZED 0
#endif

namespace {

int Serve(int argc, char** argv) {
  // Abseil built with assertions (Debian's is) checks the order of every mutex lock for
  // cycles, gRPC's locks of every call included: a debugging aid, kept for sanitizer builds.
  if (!TC_SANITIZED) absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage("tensorcompute gRPC server. Flags also read TENSORCOMPUTE_<FLAG>.");
  // The arguments a device's worker process starts with (besides its own).
  const std::vector<std::string> server_args(argv + 1, argv + argc);
  tc::server::ApplyEnvironment();
  absl::ParseCommandLine(argc, argv);
  if (const int fd = absl::GetFlag(FLAGS_worker_fd); fd >= 0) {
    // A device's worker: it goes with the server that started it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != absl::GetFlag(FLAGS_worker_parent)) return 1;
    return tc::server::worker::WorkerMain(fd, tc::server::MakeWorkerDevice());
  }

  // Signals are taken synchronously by this thread (sigwait), so block them before any other
  // thread starts: every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // A reference to the gRPC library that is never given back: its final shutdown in gRPC 1.51
  // joins an idle poller thread that may sleep up to 10 s more, after every call has
  // finished and everything of ours is freed. Exiting without it loses nothing.
  grpc_init();
  RaiseDescriptorLimit();

  const int64_t max_message = absl::GetFlag(FLAGS_max_message_bytes);
  if (max_message <= 0 || max_message > INT32_MAX) {
    Log("--max_message_bytes must be between 1 and 2147483647");
    return 2;
  }

  const auto grpc_args = tc::util::ParseNameIntegers(absl::GetFlag(FLAGS_grpc_args));
  if (!grpc_args.ok()) {
    Log(absl::StrCat("--grpc_args: ", grpc_args.status().message()));
    return 2;
  }

  if (absl::GetFlag(FLAGS_request_threads) < 1) {
    Log("--request_threads must be at least 1");
    return 2;
  }
  const int max_rank = absl::GetFlag(FLAGS_max_rank);
  if (max_rank < 0 || max_rank > tc::kMaxRank) Fail("--max_rank must be between 0 and 8");
  if (const std::string steps = absl::GetFlag(FLAGS_expression_steps);
      steps != "while_compiling" && steps != "never" && steps != "always") {
    Fail(absl::StrCat("--expression_steps: '", steps, "' is not while_compiling, never or always"));
  }
  auto [device_list, backend_name] =
      tc::server::MakeDevices(absl::GetFlag(FLAGS_backend), server_args);
  tc::runtime::DeviceSet devices(std::move(device_list));
  // A device that fails fails its own requests (UNAVAILABLE) and nothing else. Health then
  // tells an orchestrator two things. The server as a whole (service "", the liveness probe)
  // turns NOT_SERVING where only a restart brings the device back; a device with a worker
  // process of its own (--device_workers) comes back by itself, so liveness stays SERVING.
  // The services (readiness) stay SERVING while any device works, so traffic keeps flowing at
  // reduced capacity; with no device left they turn NOT_SERVING too, until one is back.
  std::atomic<grpc::HealthCheckServiceInterface*> health_service{nullptr};
  std::mutex health_mu;
  const auto publish_health = [&devices, &health_mu](grpc::HealthCheckServiceInterface* h) {
    std::lock_guard<std::mutex> lock(health_mu);
    const bool any = devices.usable() > 0;
    h->SetServingStatus("", !devices.needs_restart());
    h->SetServingStatus(tensorcompute::v1::TensorService::service_full_name(), any);
    h->SetServingStatus(inference::GRPCInferenceService::service_full_name(), any);
  };
  for (int i = 0; i < devices.size(); ++i) {
    devices.at(i).set_failure_listener([&health_service, &devices, publish_health](
                                           const tc::runtime::Device& d, const absl::Status& why) {
      const int left = devices.usable();
      Log(absl::StrCat("device ", d.info().index, " (", d.info().kind, ") failed: ", why.ToString(),
                       "; ", left, " of ", devices.size(),
                       " device(s) still serve; health: server ",
                       devices.needs_restart() ? "NOT_SERVING (restart)"
                                               : "SERVING (a new worker takes its place)",
                       left > 0 ? ", services SERVING" : ", services NOT_SERVING"));
      if (auto* h = health_service.load()) publish_health(h);
    });
    devices.at(i).set_recovery_listener(
        [&health_service, publish_health](const tc::runtime::Device&) {
          if (auto* h = health_service.load()) publish_health(h);
        });
  }
  auto request_pool = std::make_unique<tc::ThreadPool>(absl::GetFlag(FLAGS_request_threads));
  // Large unary inputs and outputs in reused buffers, pinned where the devices take pinned
  // memory (one device's pin serves them all).
  std::unique_ptr<tc::server::HostBuffers> host_buffers;
  if (absl::GetFlag(FLAGS_host_buffer_bytes) > 0) {
    tc::runtime::HostMaps* first = devices.at(0).host_maps();
    host_buffers = std::make_unique<tc::server::HostBuffers>(
        absl::GetFlag(FLAGS_host_buffer_bytes), [first](void* p, int64_t n) {
          return first != nullptr ? first->PinHost(p, n, /*read_only=*/false) : nullptr;
        });
  }

  tc::server::ResidentOptions resident_options;
  resident_options.quota_bytes = absl::GetFlag(FLAGS_resident_quota_bytes);
  resident_options.max_tensors = absl::GetFlag(FLAGS_resident_max_tensors);
  resident_options.default_ttl = absl::Seconds(absl::GetFlag(FLAGS_resident_ttl_seconds));
  resident_options.max_ttl = absl::Seconds(absl::GetFlag(FLAGS_resident_max_ttl_seconds));
  tc::server::ResidentStore resident(resident_options);

  // Regions start listening once the gRPC port is known (the default socket is named by it).
  // Every kind of shared memory counts against one server-wide limit, sized by the machine.
  int64_t shared_limit = absl::GetFlag(FLAGS_shared_memory_limit_bytes);
  if (shared_limit < 0) Fail("--shared_memory_limit_bytes must be 0 or more");
  if (shared_limit == 0) shared_limit = MachineMemory() / 4;
  tc::server::MappedBytes mapped(shared_limit);
  tc::server::RegionOptions region_options;
  region_options.quota_bytes = absl::GetFlag(FLAGS_region_quota_bytes);
  if (region_options.quota_bytes < 0) Fail("--region_quota_bytes must be 0 or more");
  if (region_options.quota_bytes == 0) region_options.quota_bytes = shared_limit;
  region_options.max_regions = absl::GetFlag(FLAGS_region_max_count);
  region_options.max_connections = absl::GetFlag(FLAGS_region_max_connections);
  region_options.max_connections_per_process = absl::GetFlag(FLAGS_region_connections_per_process);
  region_options.max_connections_per_user = absl::GetFlag(FLAGS_region_connections_per_user);
  region_options.idle_timeout = absl::Seconds(absl::GetFlag(FLAGS_region_idle_seconds));
  if (region_options.max_connections < 1 || region_options.max_connections_per_process < 1 ||
      region_options.max_connections_per_user < 1) {
    Fail("--region_max_connections and --region_connections_per_* must be at least 1");
  }
  region_options.pin = absl::GetFlag(FLAGS_region_pin);
  const std::string region_socket = absl::GetFlag(FLAGS_region_socket);
  // Every kind of shared memory callers register; the socket offers memfds and IPC handles.
  auto regions = std::make_unique<tc::server::RegionStore>(region_options, &devices, &mapped);
  std::unique_ptr<tc::server::RegionSocket> region_listener;

  tc::server::Metrics metrics;
  tc::server::AddGauges(metrics, devices, resident, regions.get());
  std::unique_ptr<tc::server::MetricsHttpServer> metrics_http;
  if (const int port = absl::GetFlag(FLAGS_metrics_port); port >= 0) {
    auto m = tc::server::MetricsHttpServer::Start(absl::GetFlag(FLAGS_address), port, &metrics);
    if (!m.ok()) Fail(std::string(m.status().message()), 1);
    metrics_http = *std::move(m);
    Log(absl::StrCat("metrics on http://", absl::GetFlag(FLAGS_address), ":", metrics_http->port(),
                     "/metrics"));
  }

  tc::server::ServiceOptions options;
  options.max_message_bytes = max_message;
  options.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  options.max_elements = absl::GetFlag(FLAGS_max_elements);
  options.max_rank = max_rank;
  options.max_concurrent_per_device = absl::GetFlag(FLAGS_max_concurrent_per_device);
  options.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  if (options.chunk_bytes < 1) Fail("--chunk_bytes must be positive");
  // A chunk and its framing must fit in one message.
  options.chunk_bytes =
      std::min(options.chunk_bytes, std::max(max_message - 1024, max_message / 2));
  options.backend = backend_name;
  options.metrics_port = metrics_http != nullptr ? metrics_http->port() : -1;
  options.instance = InstanceId();
  const tc::server::Auth auth = tc::server::MakeAuth();
  tc::server::Lifecycle life;
  tc::server::TensorServiceImpl service(&devices, request_pool.get(), &resident, regions.get(),
                                        &metrics, &auth, options, &life, host_buffers.get());
  // The open inference protocol (KServe v2) on the same port, through the same engine.
  tc::server::InferenceServiceImpl inference(
      tc::server::ServiceEnv{&devices, request_pool.get(), &resident, regions.get(), &metrics,
                             &auth, options, &life},
      absl::GetFlag(FLAGS_system_shared_memory));
  tc::server::MemoryReleaser releaser([&life] { return life.active() > 0; },
                                      absl::GetFlag(FLAGS_malloc_cushion_bytes));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address =
      absl::StrCat(absl::GetFlag(FLAGS_address), ":", absl::GetFlag(FLAGS_port));
  int bound_port = 0;
  const std::shared_ptr<grpc::ServerCredentials> credentials = tc::server::Credentials();
  builder.AddListeningPort(address, credentials, &bound_port);
  const std::string unix_socket = absl::GetFlag(FLAGS_unix_socket);
  if (!unix_socket.empty()) {
    // A socket file left by an earlier server that did not stop cleanly.
    struct stat st;
    if (lstat(unix_socket.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(unix_socket.c_str());
    builder.AddListeningPort("unix:" + unix_socket, credentials);
  }
  // Clients find a frozen server by HTTP/2 pings (a second apart, idle or not; the project's
  // clients send them): answer them all. gRPC's default takes more than one ping in five
  // minutes on a connection with no call as abuse and closes it.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 200);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_message));
  for (const auto& [name, value] : *grpc_args) builder.AddChannelArgument(name, value);
  builder.SetMaxSendMessageSize(static_cast<int>(max_message));
  builder.RegisterService(&service);
  builder.RegisterService(&inference);
  tc::server::UnservedMethods unserved;
  builder.RegisterCallbackGenericService(&unserved);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    Log(absl::StrCat("cannot listen on ", address));
    return 1;
  }
  if (region_socket != "off") {
    region_listener = std::make_unique<tc::server::RegionSocket>(regions.get());
    std::string at =
        region_socket == "auto" ? absl::StrCat("@tensorcompute-", bound_port) : region_socket;
    absl::Status listening = region_listener->Listen(at);
    if (!listening.ok() && region_socket == "auto") {
      // An earlier server on this port may still be draining with the name; clients take
      // the address from ServerInfo, so any free name serves.
      at = absl::StrCat("@tensorcompute-", bound_port, "-", getpid());
      listening = region_listener->Listen(at);
    }
    if (!listening.ok()) Fail(absl::StrCat("--region_socket: ", listening.message()), 1);
    Log(absl::StrCat("shared-memory regions registered on unix socket ", at));
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health_service.store(health);
  // (Failures before the store above have been logged but not yet reported.)
  publish_health(health);
  Log(absl::StrCat("serving tensorcompute.v1.TensorService and inference.GRPCInferenceService on ",
                   absl::GetFlag(FLAGS_address), ":", bound_port,
                   unix_socket.empty() ? "" : " and unix:", unix_socket));
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    // Written whole under a temporary name, then renamed, so a reader never sees half of it.
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp) << bound_port << "\n";
    std::rename(tmp.c_str(), path.c_str());
  }

  int sig = 0;
  sigwait(&stop_signals, &sig);
  const int grace = absl::GetFlag(FLAGS_shutdown_grace_seconds);
  Log(absl::StrCat("signal ", sig, ": draining for up to ", grace, " s"));
  // Health first, so balancers stop sending; then new calls are refused UNAVAILABLE by the
  // handlers while in-flight ones get the grace period to finish. gRPC's own Shutdown comes
  // last, once nothing is left in flight (and a moment later, so that clients read their
  // last frames before connections close): calls reaching it get CANCELLED instead.
  const auto grace_end = std::chrono::system_clock::now() + std::chrono::seconds(grace);
  health->SetServingStatus(false);
  life.StartDraining();
  const int in_flight = life.active();
  while (life.active() > 0 && std::chrono::system_clock::now() < grace_end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (life.active() > 0) {
    Log(absl::StrCat(life.active(), " calls still in flight after the grace period: cancelling"));
  } else {
    Log(absl::StrCat(in_flight, " calls in flight at the signal: all finished"));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  // Nothing of ours is left in flight: gRPC gets a second to close what it still holds open
  // (without the bound, an idle client connection kept Shutdown waiting 15 s), then cancels.
  // Cancelled calls finish as their reactors see it; should one never finish, gRPC's
  // Shutdown would wait for it forever: the process goes anyway a few seconds later.
  static std::atomic<bool> shut_down{false};
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(kShutdownBoundSeconds));
    if (shut_down.load()) return;
    Log(absl::StrCat("calls still not finished ", kShutdownBoundSeconds,
                     " s after they were cancelled: exiting without them"));
    std::_Exit(2);
  }).detach();
  server->Shutdown(std::min(grace_end, std::chrono::system_clock::now() + std::chrono::seconds(1)));
  // Nothing reports to the health service of a server that is gone.
  health_service.store(nullptr);
  // A call cancelled by Shutdown may still be letting go of its work on a device's completion
  // thread, which may still hand work to the request pool: wait for the last (the watchdog
  // above still bounds it).
  while (life.active() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  shut_down.store(true);
  request_pool.reset();
  if (!unix_socket.empty()) unlink(unix_socket.c_str());
  Log("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int code = Serve(argc, argv);
  // Everything of this server's is gone with Serve's locals, its threads joined; gRPC's
  // threads (grpc_init is never given back, above), the CUDA runtime's and the expression
  // compiler's are not. exit() would tear down the libraries under them (static destructors,
  // the CUDA runtime's own teardown), which gRPC does not support and which once ended a
  // CUDA server with SIGSEGV after "stopped": leave without. A sanitizer build keeps exit()
  // for its leak check (on the CPU backend, whose tests it runs).
#if TC_SANITIZED
  return code;
#else
  std::fflush(nullptr);
  std::_Exit(code);
#endif
}
