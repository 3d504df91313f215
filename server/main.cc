// tensorcompute-server: the gRPC process.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/cpu_device.h"
#include "server/auth.h"
#include "server/inference_service.h"
#include "server/mapped_bytes.h"
#include "server/memory_release.h"
#include "server/metrics.h"
#include "server/resident.h"
#include "server/service.h"
#include "server/unserved.h"
#if TC_WITH_CUDA
#include "kernels/cuda/expr_kernels.h"
#include "runtime/cuda_device.h"
#endif

ABSL_FLAG(std::string, address, "0.0.0.0", "Address to listen on.");
ABSL_FLAG(int, port, 50051, "Port to listen on; 0 picks a free one (see --port_file).");
ABSL_FLAG(std::string, port_file, "",
          "If set, the port actually bound is written to this file once the server serves.");
ABSL_FLAG(std::string, backend, "auto",
          "auto: CUDA when a GPU is visible, else CPU; cpu; or cuda (fails without a GPU).");
ABSL_FLAG(std::string, devices, "all",
          "CUDA devices to use with the cuda backend: 'all' or a list such as '0,2'.");
ABSL_FLAG(int, streams_per_device, 4, "CUDA streams per device; requests share them.");
ABSL_FLAG(int64_t, memory_budget, 0,
          "Bytes of memory each device hands out; 0: 90% of a GPU's free memory, half of RAM "
          "on the CPU backend.");
ABSL_FLAG(int, memory_wait_ms, 200,
          "How long a request waits for memory over the budget before RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, staging_bytes, int64_t{4} << 20, "Pinned staging buffer size (two per stream).");
ABSL_FLAG(int64_t, test_inject_device_fault_at_run, 0,
          "Test only: a device fails at its N-th run (a trapping kernel on a GPU), to check "
          "that its requests then fail cleanly and health says so. 0: never.");
ABSL_FLAG(std::string, test_inject_device_fault_devices, "all",
          "Test only: the devices --test_inject_device_fault_at_run fails: 'all' or a list of "
          "indices such as '1'.");
ABSL_FLAG(bool, test_shared_gpu, false,
          "Test only: a GPU may be listed twice in --devices, as two devices that share it "
          "(their copies between each other are device-to-device copies), so that several "
          "devices can be tested on one GPU. A fault on one fails both.");
ABSL_FLAG(int, test_cpu_devices, 1,
          "Test only: split the CPU backend into this many devices (threads and budget "
          "divided), so that several devices can be tested without GPUs.");
ABSL_FLAG(int, cpu_threads, 0, "Threads of the CPU backend; 0: one per hardware thread.");
ABSL_FLAG(int, request_threads, 8,
          "Threads that decode, copy and plan requests (kernels run on the devices).");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{256} << 20,
          "Largest request and response message, in bytes (at most 2 GiB - 1).");
ABSL_FLAG(int64_t, max_request_bytes, int64_t{64} << 30,
          "Largest sum of one request's input storage (streamed and resident included).");
ABSL_FLAG(int64_t, max_elements, int64_t{1} << 36, "Most elements in one input or output.");
ABSL_FLAG(int, max_rank, 8, "Highest rank accepted (at most 8).");
ABSL_FLAG(int, max_concurrent_per_device, 256,
          "Requests admitted per device at once; more get RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, chunk_bytes, int64_t{1} << 20, "Chunk size of streamed replies.");
ABSL_FLAG(int64_t, malloc_cushion_bytes, int64_t{256} << 20,
          "Free memory the allocator may keep while calls are in flight (reused by the next "
          "chunks instead of faulting fresh pages in); all of it goes back once none is.");
ABSL_FLAG(int64_t, resident_quota_bytes, int64_t{16} << 30,
          "Bytes of resident tensors one client may keep.");
ABSL_FLAG(int, resident_max_tensors, 4096, "Resident tensors one client may keep.");
ABSL_FLAG(int64_t, resident_ttl_seconds, 600, "Default lifetime of a resident tensor.");
ABSL_FLAG(int64_t, resident_max_ttl_seconds, 86400, "Longest lifetime a client may ask for.");
ABSL_FLAG(std::string, unix_socket, "",
          "Also serve gRPC on this Unix socket path (clients: unix:///PATH): same-host callers "
          "skip the TCP stack. Empty: TCP only.");
ABSL_FLAG(std::string, region_socket, "auto",
          "Unix socket where same-host clients register shared-memory regions: a path, "
          "'@name' (abstract namespace), 'auto' ('@tensorcompute-PORT', or -PORT-PID when "
          "that is taken), or 'off'.");
ABSL_FLAG(int64_t, shared_memory_limit_bytes, 0,
          "Bytes of shared memory (regions, CUDA IPC memory, KServe v2 system shared memory) "
          "all callers together may have registered; 0: a quarter of the machine's memory "
          "(or of the container's memory limit).");
ABSL_FLAG(int64_t, region_quota_bytes, 0,
          "Bytes of shared-memory regions one client may have registered; 0: "
          "--shared_memory_limit_bytes.");
ABSL_FLAG(int, region_max_count, 256, "Shared-memory regions one client may have registered.");
ABSL_FLAG(int, region_max_connections, 256, "Connections the region socket keeps open at once.");
ABSL_FLAG(int, region_connections_per_process, 16,
          "Region socket connections one process may hold.");
ABSL_FLAG(int, region_connections_per_user, 128,
          "Region socket connections the processes of one user (uid) may hold.");
ABSL_FLAG(int64_t, region_idle_seconds, 30,
          "A region socket connection holding no region and no ticket is closed after this "
          "long without a message.");
ABSL_FLAG(bool, region_pin, true,
          "Pin regions for the GPU (cudaHostRegister) when they are registered, so copies to "
          "and from them run at full PCIe speed; false: copy through the staging buffers.");
ABSL_FLAG(bool, system_shared_memory, false,
          "Serve KServe v2 system shared memory: callers name POSIX shared-memory objects of "
          "this host (shm_open), which the server opens with its own permissions; only for "
          "servers whose callers may read and write every such object the server can.");
ABSL_FLAG(int, metrics_port, 9450,
          "Port of the Prometheus /metrics endpoint (HTTP); 0 picks a free one, -1 turns it off.");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve TLS (with --tls_key).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: require client certificates signed by it (mutual TLS).");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "File of bearer tokens, one 'name:token' per line; calls must then carry "
          "'authorization: Bearer <token>'. Also $TENSORCOMPUTE_AUTH_TOKENS, comma-separated.");
ABSL_FLAG(int, shutdown_grace_seconds, 10,
          "On SIGTERM/SIGINT, how long in-flight requests get to finish.");

namespace {

// Every flag can also come from the environment as TENSORCOMPUTE_<NAME>, for containers; the
// command line wins.
void ApplyEnvironment() {
  for (const char* name :
       {"address", "port", "port_file", "backend", "devices", "streams_per_device",
        "memory_budget", "memory_wait_ms", "staging_bytes", "cpu_threads", "request_threads",
        "max_message_bytes", "max_request_bytes", "max_elements", "max_rank",
        "max_concurrent_per_device", "chunk_bytes", "resident_quota_bytes",
        "resident_max_tensors", "resident_ttl_seconds", "resident_max_ttl_seconds",
        "unix_socket", "region_socket", "shared_memory_limit_bytes", "region_quota_bytes",
        "region_max_count", "region_max_connections", "region_connections_per_process",
        "region_connections_per_user", "region_idle_seconds", "region_pin", "metrics_port",
        "tls_cert", "tls_key", "tls_client_ca", "auth_tokens_file", "shutdown_grace_seconds"}) {
    const std::string var = absl::StrCat("TENSORCOMPUTE_", absl::AsciiStrToUpper(name));
    const char* value = std::getenv(var.c_str());
    if (value == nullptr) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string error;
    if (flag == nullptr || !flag->ParseFrom(value, &error)) {
      std::fprintf(stderr, "tensorcompute: bad %s=%s: %s\n", var.c_str(), value, error.c_str());
      std::exit(2);
    }
  }
}

void Log(const std::string& line) {
  std::fprintf(stderr, "%s tensorcompute: %s\n",
               absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()).c_str(),
               line.c_str());
}

[[noreturn]] void Fail(const std::string& line, int code = 2) {
  Log(line);
  std::exit(code);
}

// The machine's memory, or the container's limit where that is lower (cgroup v2, then v1).
int64_t MachineMemory() {
  int64_t bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  for (const char* path : {"/sys/fs/cgroup/memory.max",
                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream f(path);
    int64_t limit = 0;
    if (f >> limit && limit > 0 && limit < bytes) bytes = limit;
  }
  return bytes;
}

// Descriptors: the region socket's connections and tickets hold some each, besides gRPC's.
void RaiseDescriptorLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &r);
  }
}

// Whether --test_inject_device_fault_devices names device `index`.
bool FaultInjectedOn(int index) {
  const std::string list = absl::GetFlag(FLAGS_test_inject_device_fault_devices);
  if (list == "all") return true;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    int i = 0;
    if (!absl::SimpleAtoi(part, &i)) {
      Fail(absl::StrCat("--test_inject_device_fault_devices: bad device '", part, "'"));
    }
    if (i == index) return true;
  }
  return false;
}

tc::runtime::DeviceOptions DeviceOptionsFromFlags() {
  tc::runtime::DeviceOptions o;
  o.memory_budget = absl::GetFlag(FLAGS_memory_budget);
  o.memory_wait = absl::Milliseconds(absl::GetFlag(FLAGS_memory_wait_ms));
  o.streams = absl::GetFlag(FLAGS_streams_per_device);
  o.staging_bytes = absl::GetFlag(FLAGS_staging_bytes);
  o.inject_fault_at_run = absl::GetFlag(FLAGS_test_inject_device_fault_at_run);
  if (o.memory_budget < 0 || o.streams < 1 || o.staging_bytes < (64 << 10)) {
    Fail("--memory_budget must be >= 0, --streams_per_device >= 1, --staging_bytes >= 65536");
  }
  return o;
}

// The devices the server computes on, and the backend's name.
std::pair<std::vector<std::unique_ptr<tc::runtime::Device>>, std::string> MakeDevices(
    const std::string& choice) {
  if (choice != "auto" && choice != "cpu" && choice != "cuda") {
    Fail(absl::StrCat("--backend must be auto, cpu or cuda, not '", choice, "'"));
  }
  const tc::runtime::DeviceOptions options = DeviceOptionsFromFlags();
  std::vector<std::unique_ptr<tc::runtime::Device>> devices;
#if TC_WITH_CUDA
  const int count = tc::runtime::CudaDevice::Count();
  if (choice == "cuda" || (choice == "auto" && count > 0)) {
    std::vector<int> wanted;
    const std::string list = absl::GetFlag(FLAGS_devices);
    if (list == "all") {
      for (int i = 0; i < count; ++i) wanted.push_back(i);
    } else {
      for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
        int i = 0;
        if (!absl::SimpleAtoi(part, &i)) Fail(absl::StrCat("--devices: bad device '", part, "'"));
        wanted.push_back(i);
      }
    }
    std::string failure = count == 0 ? "no CUDA device visible" : "";
    std::vector<tc::runtime::CudaDevice*> gpus;
    for (int i : wanted) {
      if (std::count(wanted.begin(), wanted.end(), i) > 1 && !absl::GetFlag(FLAGS_test_shared_gpu)) {
        Fail(absl::StrCat("--devices: device ", i, " is listed twice"));
      }
      tc::runtime::DeviceOptions o = options;
      if (!FaultInjectedOn(i)) o.inject_fault_at_run = 0;
      // Two devices on one GPU report their places in the list instead.
      if (absl::GetFlag(FLAGS_test_shared_gpu)) o.report_index = static_cast<int>(devices.size());
      auto d = tc::runtime::CudaDevice::Create(i, o);
      if (!d.ok()) {
        failure = std::string(d.status().message());
        if (list == "all") {
          // A GPU that cannot start (one that failed for good) leaves the others serving, so
          // that a restart after a device failure does not fail the whole server.
          Log(absl::StrCat("device ", i, " left out: ", failure));
          continue;
        }
        devices.clear();
        gpus.clear();
        break;
      }
      Log(absl::StrCat("device ", i, ": ", (*d)->info().name, ", ",
                       (*d)->info().multiprocessors, " multiprocessors, budget ",
                       tc::runtime::FormatBytes((*d)->memory_budget()), ", ",
                       (*d)->info().streams, " streams"));
      gpus.push_back(d->get());
      devices.push_back(*std::move(d));
    }
    if (!devices.empty()) {
      tc::runtime::CudaDevice::ConnectPeers(gpus);
      for (const auto& d : devices) {
        if (devices.size() < 2) break;
        Log(absl::StrCat("device ", d->info().index, " reaches ",
                         d->info().peers.empty() ? "no other device directly (copies go "
                                                   "through the host)"
                                                 : absl::StrCat("device(s) ",
                                                                absl::StrJoin(d->info().peers, ","),
                                                                " directly (peer access)")));
      }
      Log(absl::StrCat("backend: cuda (", devices.size(), " device(s))"));
      return {std::move(devices), "cuda"};
    }
    if (choice == "cuda") Fail(absl::StrCat("--backend=cuda: ", failure), 1);
    Log(absl::StrCat("no usable GPU (", failure, ")"));
  }
#else
  if (choice == "cuda") {
    Fail("--backend=cuda: this build has no CUDA backend (built with WITH_CUDA=OFF)", 1);
  }
#endif
  const int parts = absl::GetFlag(FLAGS_test_cpu_devices);
  if (parts < 1 || parts > 16) Fail("--test_cpu_devices must be between 1 and 16");
  int threads = absl::GetFlag(FLAGS_cpu_threads);
  tc::runtime::DeviceOptions o = options;
  if (parts > 1) {
    if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
    threads = std::max(1, threads / parts);
    if (o.memory_budget == 0) o.memory_budget = tc::runtime::PhysicalMemoryBytes() / 2 / parts;
  }
  for (int i = 0; i < parts; ++i) {
    tc::runtime::DeviceOptions oi = o;
    if (!FaultInjectedOn(i)) oi.inject_fault_at_run = 0;
    devices.push_back(std::make_unique<tc::runtime::CpuDevice>(threads, oi, i));
  }
  Log(absl::StrCat("backend: cpu (", std::thread::hardware_concurrency(),
                   " hardware threads, budget ",
                   tc::runtime::FormatBytes(devices[0]->memory_budget()),
                   parts > 1 ? absl::StrCat(" each of ", parts, " devices") : "", ")"));
  return {std::move(devices), "cpu"};
}

std::string ReadFileOrDie(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail(absl::StrCat("--", flag, ": cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::shared_ptr<grpc::ServerCredentials> Credentials() {
  const std::string cert = absl::GetFlag(FLAGS_tls_cert);
  const std::string key = absl::GetFlag(FLAGS_tls_key);
  const std::string client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  if (cert.empty() != key.empty()) Fail("--tls_cert and --tls_key go together");
  if (cert.empty()) {
    if (!client_ca.empty()) Fail("--tls_client_ca needs --tls_cert and --tls_key");
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back(
      {ReadFileOrDie(key, "tls_key"), ReadFileOrDie(cert, "tls_cert")});
  if (!client_ca.empty()) {
    options.pem_root_certs = ReadFileOrDie(client_ca, "tls_client_ca");
    options.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  Log(client_ca.empty() ? "TLS on" : "TLS on, client certificates required");
  return grpc::SslServerCredentials(options);
}

tc::server::Auth MakeAuth() {
  std::string text;
  char separator = '\n';
  if (const std::string path = absl::GetFlag(FLAGS_auth_tokens_file); !path.empty()) {
    text = ReadFileOrDie(path, "auth_tokens_file");
  } else if (const char* env = std::getenv("TENSORCOMPUTE_AUTH_TOKENS"); env != nullptr) {
    text = env;
    separator = ',';
  } else {
    return tc::server::Auth();
  }
  auto auth = tc::server::Auth::FromText(text, separator);
  if (!auth.ok()) Fail(absl::StrCat("bearer tokens: ", auth.status().message()));
  Log("bearer tokens required");
  if (absl::GetFlag(FLAGS_tls_cert).empty()) {
    Log("warning: bearer tokens without TLS travel in clear text");
  }
  return *std::move(auth);
}

void AddGauges(tc::server::Metrics& metrics, const tc::runtime::DeviceSet& devices,
               const tc::server::ResidentStore& resident,
               const tc::server::RegionStore* regions) {
  auto per_device = [&devices](auto value) {
    return [&devices, value] {
      std::vector<std::pair<std::string, double>> out;
      for (int i = 0; i < devices.size(); ++i) {
        const tc::runtime::Device& d = devices.at(i);
        out.emplace_back(absl::StrCat("device=\"", d.info().index, "\",kind=\"", d.info().kind, "\""),
                         static_cast<double>(value(d)));
      }
      return out;
    };
  };
  metrics.AddGauge("tensorcompute_device_memory_in_use_bytes",
                   "Device memory held by requests and resident tensors.",
                   per_device([](const tc::runtime::Device& d) { return d.memory_in_use(); }));
  metrics.AddGauge("tensorcompute_device_memory_budget_bytes",
                   "Device memory the server may hand out.",
                   per_device([](const tc::runtime::Device& d) { return d.memory_budget(); }));
  metrics.AddGauge("tensorcompute_device_memory_peak_bytes", "Most device memory held at once.",
                   per_device([](const tc::runtime::Device& d) { return d.memory_peak(); }));
  metrics.AddGauge("tensorcompute_device_failed",
                   "1 once the device has failed for good (the server needs a restart).",
                   per_device([](const tc::runtime::Device& d) { return d.failed() ? 1 : 0; }));
  metrics.AddGauge("tensorcompute_device_requests_in_flight",
                   "Requests admitted to the device and not finished (its queue depth).",
                   per_device([](const tc::runtime::Device& d) { return d.in_flight(); }));
  metrics.AddGauge("tensorcompute_device_requests_total", "Requests admitted to the device.",
                   per_device([](const tc::runtime::Device& d) { return d.admitted(); }),
                   "counter");
  metrics.AddGauge("tensorcompute_heap_bytes",
                   "The server's heap as its allocator counts it: in use (state=\"allocated\"), "
                   "and freed but kept mapped for reuse (state=\"free\").",
                   [] {
                     const tc::server::HeapStats h = tc::server::ReadHeapStats();
                     std::vector<std::pair<std::string, double>> out;
                     if (h.allocated_bytes >= 0) {
                       out.emplace_back("state=\"allocated\"",
                                        static_cast<double>(h.allocated_bytes));
                     }
                     if (h.free_bytes >= 0) {
                       out.emplace_back("state=\"free\"", static_cast<double>(h.free_bytes));
                     }
                     return out;
                   });
  metrics.AddGauge("tensorcompute_resident_tensors", "Resident tensors held.", [&resident] {
    return std::vector<std::pair<std::string, double>>{
        {"", static_cast<double>(resident.count())}};
  });
  metrics.AddGauge("tensorcompute_resident_bytes", "Bytes of resident tensors held.",
                   [&resident] {
                     return std::vector<std::pair<std::string, double>>{
                         {"", static_cast<double>(resident.bytes())}};
                   });
#if TC_WITH_CUDA
  // Expression kernels (NVRTC), shared by every GPU of the process.
  auto expr_stat = [](auto value) {
    return [value] {
      return std::vector<std::pair<std::string, double>>{
          {"", static_cast<double>(value(tc::cuda::ExprKernelCache::Shared().stats()))}};
    };
  };
  using Stats = tc::cuda::ExprCacheStats;
  metrics.AddGauge("tensorcompute_expression_compiles_total",
                   "Expression kernels compiled (NVRTC) since the server started.",
                   expr_stat([](const Stats& s) { return s.compiles; }));
  metrics.AddGauge("tensorcompute_expression_compile_seconds_total",
                   "Time spent compiling and loading expression kernels.",
                   expr_stat([](const Stats& s) { return s.compile_seconds; }));
  metrics.AddGauge("tensorcompute_expression_compile_failures_total",
                   "Expression kernels that failed to compile or load.",
                   expr_stat([](const Stats& s) { return s.compile_failures; }));
  metrics.AddGauge("tensorcompute_expression_cache_hits_total",
                   "Expression requests whose kernel was already compiled.",
                   expr_stat([](const Stats& s) { return s.hits; }));
  metrics.AddGauge("tensorcompute_expression_cache_misses_total",
                   "Expression requests that waited for a compilation.",
                   expr_stat([](const Stats& s) { return s.misses; }));
  metrics.AddGauge("tensorcompute_expression_compiles_refused_total",
                   "Expression requests refused because too many compilations were waiting.",
                   expr_stat([](const Stats& s) { return s.refused; }));
  metrics.AddGauge("tensorcompute_expression_kernels", "Expression kernels cached.",
                   expr_stat([](const Stats& s) { return s.entries; }));
#endif
  if (regions == nullptr) return;
  metrics.AddGauge("tensorcompute_regions", "Shared-memory regions registered.", [regions] {
    return std::vector<std::pair<std::string, double>>{
        {"", static_cast<double>(regions->count())}};
  });
  metrics.AddGauge("tensorcompute_region_bytes", "Bytes of shared-memory regions registered.",
                   [regions] {
                     return std::vector<std::pair<std::string, double>>{
                         {"", static_cast<double>(regions->bytes())}};
                   });
  metrics.AddGauge("tensorcompute_shared_memory_bytes",
                   "Shared memory of every kind registered, and the server-wide limit.",
                   [mapped = regions->mapped()] {
                     return std::vector<std::pair<std::string, double>>{
                         {"state=\"registered\"", static_cast<double>(mapped->used())},
                         {"state=\"limit\"", static_cast<double>(mapped->limit())}};
                   });
  metrics.AddGauge("tensorcompute_region_connections",
                   "Connections open on the region socket.", [regions] {
                     return std::vector<std::pair<std::string, double>>{
                         {"", static_cast<double>(regions->connections())}};
                   });
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("tensorcompute gRPC server. Flags also read TENSORCOMPUTE_<FLAG>.");
  ApplyEnvironment();
  absl::ParseCommandLine(argc, argv);

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

  if (absl::GetFlag(FLAGS_request_threads) < 1) {
    Log("--request_threads must be at least 1");
    return 2;
  }
  const int max_rank = absl::GetFlag(FLAGS_max_rank);
  if (max_rank < 0 || max_rank > tc::kMaxRank) Fail("--max_rank must be between 0 and 8");
  auto [device_list, backend_name] = MakeDevices(absl::GetFlag(FLAGS_backend));
  tc::runtime::DeviceSet devices(std::move(device_list));
  // A device that fails for good fails its own requests (UNAVAILABLE) and nothing else. Health
  // then tells an orchestrator two things: the server as a whole (service "", the liveness
  // probe) is NOT_SERVING, because only a restart brings the device back; the services
  // (readiness) stay SERVING while any device works, so traffic keeps flowing at reduced
  // capacity until the restart drains it. With no device left they turn NOT_SERVING too.
  std::atomic<grpc::HealthCheckServiceInterface*> health_service{nullptr};
  const auto publish_failures = [&devices](grpc::HealthCheckServiceInterface* h) {
    if (devices.usable() == devices.size()) return;
    h->SetServingStatus("", false);
    if (devices.usable() == 0) {
      h->SetServingStatus(tensorcompute::v1::TensorService::service_full_name(), false);
      h->SetServingStatus(inference::GRPCInferenceService::service_full_name(), false);
    }
  };
  for (int i = 0; i < devices.size(); ++i) {
    devices.at(i).set_failure_listener(
        [&health_service, &devices, publish_failures](const tc::runtime::Device& d,
                                                     const absl::Status& why) {
          const int left = devices.usable();
          Log(absl::StrCat("device ", d.info().index, " (", d.info().kind, ") failed: ",
                           why.ToString(), "; ", left, " of ", devices.size(),
                           " device(s) still serve; health: server NOT_SERVING (restart)",
                           left > 0 ? ", services SERVING" : ", services NOT_SERVING"));
          if (auto* h = health_service.load()) publish_failures(h);
        });
  }
  auto request_pool = std::make_unique<tc::ThreadPool>(absl::GetFlag(FLAGS_request_threads));

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
  region_options.max_connections_per_process =
      absl::GetFlag(FLAGS_region_connections_per_process);
  region_options.max_connections_per_user = absl::GetFlag(FLAGS_region_connections_per_user);
  region_options.idle_timeout = absl::Seconds(absl::GetFlag(FLAGS_region_idle_seconds));
  if (region_options.max_connections < 1 || region_options.max_connections_per_process < 1 ||
      region_options.max_connections_per_user < 1) {
    Fail("--region_max_connections and --region_connections_per_* must be at least 1");
  }
  region_options.pin = absl::GetFlag(FLAGS_region_pin);
  const std::string region_socket = absl::GetFlag(FLAGS_region_socket);
  std::unique_ptr<tc::server::RegionStore> regions;
  if (region_socket != "off") {
    regions = std::make_unique<tc::server::RegionStore>(region_options, &devices, &mapped);
  }

  tc::server::Metrics metrics;
  AddGauges(metrics, devices, resident, regions.get());
  std::unique_ptr<tc::server::MetricsHttpServer> metrics_http;
  if (const int port = absl::GetFlag(FLAGS_metrics_port); port >= 0) {
    auto m = tc::server::MetricsHttpServer::Start(absl::GetFlag(FLAGS_address), port, &metrics);
    if (!m.ok()) Fail(std::string(m.status().message()), 1);
    metrics_http = *std::move(m);
    Log(absl::StrCat("metrics on http://", absl::GetFlag(FLAGS_address), ":",
                     metrics_http->port(), "/metrics"));
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
  const tc::server::Auth auth = MakeAuth();
  tc::server::Lifecycle life;
  tc::server::TensorServiceImpl service(&devices, request_pool.get(), &resident, regions.get(),
                                        &metrics, &auth, options, &life);
  // The open inference protocol (KServe v2) on the same port, through the same engine.
  tc::server::InferenceServiceImpl inference(
      tc::server::ServiceEnv{&devices, request_pool.get(), &resident, regions.get(), &metrics,
                             &auth, options, &life},
      absl::GetFlag(FLAGS_system_shared_memory) ? &mapped : nullptr);
  tc::server::MemoryReleaser releaser([&life] { return life.active() > 0; },
                                      absl::GetFlag(FLAGS_malloc_cushion_bytes));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address =
      absl::StrCat(absl::GetFlag(FLAGS_address), ":", absl::GetFlag(FLAGS_port));
  int bound_port = 0;
  const std::shared_ptr<grpc::ServerCredentials> credentials = Credentials();
  builder.AddListeningPort(address, credentials, &bound_port);
  const std::string unix_socket = absl::GetFlag(FLAGS_unix_socket);
  if (!unix_socket.empty()) {
    // A socket file left by an earlier server that did not stop cleanly.
    struct stat st;
    if (lstat(unix_socket.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(unix_socket.c_str());
    builder.AddListeningPort("unix:" + unix_socket, credentials);
  }
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_message));
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
  if (regions != nullptr) {
    std::string at = region_socket == "auto" ? absl::StrCat("@tensorcompute-", bound_port)
                                             : region_socket;
    absl::Status listening = regions->Listen(at);
    if (!listening.ok() && region_socket == "auto") {
      // An earlier server on this port may still be draining with the name; clients take
      // the address from ServerInfo, so any free name serves.
      at = absl::StrCat("@tensorcompute-", bound_port, "-", getpid());
      listening = regions->Listen(at);
    }
    if (!listening.ok()) Fail(absl::StrCat("--region_socket: ", listening.message()), 1);
    Log(absl::StrCat("shared-memory regions registered on unix socket ", at));
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(tensorcompute::v1::TensorService::service_full_name(), true);
  health->SetServingStatus(inference::GRPCInferenceService::service_full_name(), true);
  health->SetServingStatus(true);
  health_service.store(health);
  // A failure before the store above has been logged but not yet reported.
  publish_failures(health);
  Log(absl::StrCat("serving tensorcompute.v1.TensorService and inference.GRPCInferenceService on ",
                   absl::GetFlag(FLAGS_address),
                   ":", bound_port, unix_socket.empty() ? "" : " and unix:", unix_socket));
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
  server->Shutdown(std::min(grace_end, std::chrono::system_clock::now() + std::chrono::seconds(1)));
  request_pool.reset();
  if (!unix_socket.empty()) unlink(unix_socket.c_str());
  Log("stopped");
  return 0;
}
