#include "server/process/devices.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "runtime/cpu_device.h"
#include "server/process/flags.h"
#include "server/env/log.h"
#include "server/worker/remote_device.h"
#if TC_WITH_CUDA
#include "kernels/cuda/expr_kernels.h"
#include "kernels/rtc/disk_cache.h"
#include "runtime/cuda_device.h"
#endif

namespace tc::server {
namespace {

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

runtime::DeviceOptions DeviceOptionsFromFlags() {
  runtime::DeviceOptions o;
  o.memory_budget = absl::GetFlag(FLAGS_memory_budget);
  o.memory_wait = absl::Milliseconds(absl::GetFlag(FLAGS_memory_wait_ms));
  o.streams = absl::GetFlag(FLAGS_streams_per_device);
  o.staging_bytes = absl::GetFlag(FLAGS_staging_bytes);
  o.copy_threads = absl::GetFlag(FLAGS_copy_threads);
  o.inject_fault_at_run = absl::GetFlag(FLAGS_test_inject_device_fault_at_run);
  if (o.memory_budget < 0 || o.streams < 1 || o.staging_bytes < (64 << 10) || o.copy_threads < 0 ||
      o.copy_threads > 256) {
    Fail(
        "--memory_budget must be >= 0, --streams_per_device >= 1, --staging_bytes >= 65536, "
        "--copy_threads 0 to 256");
  }
  return o;
}

// The options of device `index`: a fault injected only where asked, and only into the
// first worker of a device (a restarted one serves).
runtime::DeviceOptions OptionsFor(int index) {
  runtime::DeviceOptions o = DeviceOptionsFromFlags();
  if (!FaultInjectedOn(index) || absl::GetFlag(FLAGS_worker_generation) > 0) {
    o.inject_fault_at_run = 0;
  }
  return o;
}

// CPU part `index` of --test_cpu_devices (the whole CPU with one part).
std::unique_ptr<runtime::Device> MakeCpuPart(int index) {
  const int parts = absl::GetFlag(FLAGS_test_cpu_devices);
  if (parts < 1 || parts > 16) Fail("--test_cpu_devices must be between 1 and 16");
  int threads = absl::GetFlag(FLAGS_cpu_threads);
  runtime::DeviceOptions o = OptionsFor(index);
  if (parts > 1) {
    if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
    threads = std::max(1, threads / parts);
    if (o.memory_budget == 0) o.memory_budget = runtime::PhysicalMemoryBytes() / 2 / parts;
  }
  return std::make_unique<runtime::CpuDevice>(threads, o, index);
}

// Device `index` computed for by a worker process of its own.
absl::StatusOr<std::unique_ptr<runtime::Device>> StartWorker(
    const std::vector<std::string>& server_args, const std::string& backend, int index,
    const runtime::DeviceOptions& options) {
  worker::WorkerLaunch launch;
  launch.server_args = server_args;
  launch.server_args.push_back(absl::StrCat("--backend=", backend));
  launch.index = index;
  auto d = worker::RemoteDevice::Start(launch, options);
  if (!d.ok()) return d.status();
  Log(absl::StrCat("device ", index, ": worker pid ", (*d)->worker_pid()));
  return std::unique_ptr<runtime::Device>(*std::move(d));
}

#if TC_WITH_CUDA
// How new expressions are answered (--expression_steps), and their kernels kept on disk
// (--kernel_cache_dir), for this process's GPUs. A directory named on the command line that
// cannot be used safely stops the server; the default one only leaves kernels in memory,
// with a line in the log.
void UseKernelDiskCache() {
  static std::once_flag once;
  std::call_once(once, [] {
    // (Checked at start.)
    const std::string steps = absl::GetFlag(FLAGS_expression_steps);
    cuda::ExprKernelCache::Shared().SetStepMode(steps == "never" ? cuda::StepMode::kNever
                                                : steps == "always"
                                                    ? cuda::StepMode::kAlways
                                                    : cuda::StepMode::kWhileCompiling);
    std::string dir = absl::GetFlag(FLAGS_kernel_cache_dir);
    const bool told = dir != "auto";
    if (!told) {
      const char* xdg = std::getenv("XDG_CACHE_HOME");
      const char* home = std::getenv("HOME");
      dir = xdg != nullptr && xdg[0] == '/' ? absl::StrCat(xdg, "/tensorcompute/kernels")
            : home != nullptr && home[0] == '/'
                ? absl::StrCat(home, "/.cache/tensorcompute/kernels")
                : "";
    }
    if (dir.empty()) {
      Log("expression kernels: kept in memory only (no --kernel_cache_dir)");
      return;
    }
    const int64_t mib = absl::GetFlag(FLAGS_kernel_cache_mib);
    if (mib < 1 || mib > (int64_t{1} << 30)) Fail("--kernel_cache_mib must be at least 1");
    auto cache = rtc::DiskCache::Open(dir, mib << 20);
    if (!cache.ok()) {
      if (told) Fail(absl::StrCat("--kernel_cache_dir: ", cache.status().message()));
      Log(absl::StrCat("expression kernels: kept in memory only: ", cache.status().message()));
      return;
    }
    Log(absl::StrCat("expression kernels: kept on disk in ", dir, " (up to ", mib, " MiB)"));
    cuda::ExprKernelCache::Shared().UseDisk(std::shared_ptr<rtc::DiskCache>(*std::move(cache)));
  });
}
#endif

}  // namespace

std::unique_ptr<runtime::Device> MakeWorkerDevice() {
  const std::string choice = absl::GetFlag(FLAGS_backend);
  const int index = absl::GetFlag(FLAGS_worker_device);
#if TC_WITH_CUDA
  if (choice == "cuda") {
    runtime::DeviceOptions o = OptionsFor(index);
    // The other workers copy from this device's storage by importing its pool.
    o.shareable_memory = true;
    UseKernelDiskCache();
    auto d = runtime::CudaDevice::Create(index, o);
    if (!d.ok()) Fail(absl::StrCat("device ", index, ": ", d.status().message()), 1);
    return *std::move(d);
  }
#endif
  if (choice != "cpu") Fail(absl::StrCat("worker: no backend '", choice, "'"), 1);
  return MakeCpuPart(index);
}

std::pair<std::vector<std::unique_ptr<runtime::Device>>, std::string> MakeDevices(
    const std::string& choice, const std::vector<std::string>& server_args) {
  // Unless told, a server of several GPUs gives each its own worker process (a GPU fault
  // would otherwise end every GPU's work); one GPU and the CPU compute in this process.
  bool workers_told = false;
  for (const std::string& arg : server_args) {
    absl::string_view a = arg;
    if (!absl::ConsumePrefix(&a, "--")) absl::ConsumePrefix(&a, "-");
    absl::ConsumePrefix(&a, "no");
    workers_told = workers_told || a == "device_workers" || absl::StartsWith(a, "device_workers=");
  }
  bool workers = absl::GetFlag(FLAGS_device_workers);
  if (choice != "auto" && choice != "cpu" && choice != "cuda") {
    Fail(absl::StrCat("--backend must be auto, cpu or cuda, not '", choice, "'"));
  }
  const runtime::DeviceOptions options = DeviceOptionsFromFlags();
  std::vector<std::unique_ptr<runtime::Device>> devices;
#if TC_WITH_CUDA
  const int count = runtime::CudaDevice::Count();
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
    if (!workers_told) workers = wanted.size() >= 2 && !absl::GetFlag(FLAGS_test_shared_gpu);
    std::string failure = count == 0 ? "no CUDA device visible" : "";
    std::vector<runtime::CudaDevice*> gpus;
    for (int i : wanted) {
      if (std::count(wanted.begin(), wanted.end(), i) > 1 &&
          !absl::GetFlag(FLAGS_test_shared_gpu)) {
        Fail(absl::StrCat("--devices: device ", i, " is listed twice"));
      }
      runtime::DeviceOptions o = options;
      if (!FaultInjectedOn(i)) o.inject_fault_at_run = 0;
      // Two devices on one GPU report their places in the list instead.
      if (absl::GetFlag(FLAGS_test_shared_gpu)) o.report_index = static_cast<int>(devices.size());
      if (workers) {
        auto w = StartWorker(server_args, "cuda", i, o);
        if (!w.ok()) Fail(absl::StrCat("device ", i, ": ", w.status().message()), 1);
        devices.push_back(*std::move(w));
        continue;
      }
      UseKernelDiskCache();
      auto d = runtime::CudaDevice::Create(i, o);
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
      Log(absl::StrCat("device ", i, ": ", (*d)->info().name, ", ", (*d)->info().multiprocessors,
                       " multiprocessors, budget ", runtime::FormatBytes((*d)->memory_budget()),
                       ", ", (*d)->info().streams, " streams"));
      gpus.push_back(d->get());
      devices.push_back(*std::move(d));
    }
    if (!devices.empty()) {
      // (A worker's GPU reads another's storage by importing that worker's memory pool.)
      runtime::CudaDevice::ConnectPeers(gpus);
      for (const auto& d : devices) {
        if (devices.size() < 2 || workers) break;
        Log(absl::StrCat("device ", d->info().index, " reaches ",
                         d->info().peers.empty()
                             ? "no other device directly (copies go "
                               "through the host)"
                             : absl::StrCat("device(s) ", absl::StrJoin(d->info().peers, ","),
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
  for (int i = 0; i < parts; ++i) {
    if (workers) {
      auto w = StartWorker(server_args, "cpu", i, options);
      if (!w.ok()) Fail(absl::StrCat("device ", i, ": ", w.status().message()), 1);
      devices.push_back(*std::move(w));
    } else {
      devices.push_back(MakeCpuPart(i));
    }
  }
  Log(absl::StrCat("backend: cpu (", std::thread::hardware_concurrency(),
                   " hardware threads, budget ", runtime::FormatBytes(devices[0]->memory_budget()),
                   parts > 1 ? absl::StrCat(" each of ", parts, " devices") : "",
                   workers ? ", each in a worker process" : "", ")"));
  return {std::move(devices), "cpu"};
}

}  // namespace tc::server
