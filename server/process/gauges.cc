#include "server/process/gauges.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/env/memory_release.h"
#if TC_WITH_CUDA
#include "kernels/cuda/expr_kernels.h"
#endif

namespace tc::server {

void AddGauges(Metrics& metrics, const runtime::DeviceSet& devices, const ResidentStore& resident,
               const RegionStore* regions) {
  auto per_device = [&devices](auto value) {
    return [&devices, value] {
      std::vector<std::pair<std::string, double>> out;
      for (int i = 0; i < devices.size(); ++i) {
        const runtime::Device& d = devices.at(i);
        out.emplace_back(
            absl::StrCat("device=\"", d.info().index, "\",kind=\"", d.info().kind, "\""),
            static_cast<double>(value(d)));
      }
      return out;
    };
  };
  metrics.AddGauge("tensorcompute_device_memory_in_use_bytes",
                   "Device memory held by requests and resident tensors.",
                   per_device([](const runtime::Device& d) { return d.memory_in_use(); }));
  metrics.AddGauge("tensorcompute_device_memory_budget_bytes",
                   "Device memory the server may hand out.",
                   per_device([](const runtime::Device& d) { return d.memory_budget(); }));
  metrics.AddGauge("tensorcompute_device_memory_peak_bytes", "Most device memory held at once.",
                   per_device([](const runtime::Device& d) { return d.memory_peak(); }));
  metrics.AddGauge("tensorcompute_device_failed",
                   "1 while the device has failed: for good (the server needs a restart), or "
                   "until a new worker process takes its place (--device_workers).",
                   per_device([](const runtime::Device& d) { return d.failed() ? 1 : 0; }));
  metrics.AddGauge("tensorcompute_device_restarts_total",
                   "Times the device started over in a new worker process after a failure.",
                   per_device([](const runtime::Device& d) { return d.generation(); }), "counter");
  metrics.AddGauge("tensorcompute_device_requests_in_flight",
                   "Requests admitted to the device and not finished (its queue depth).",
                   per_device([](const runtime::Device& d) { return d.in_flight(); }));
  metrics.AddGauge("tensorcompute_device_requests_total", "Requests admitted to the device.",
                   per_device([](const runtime::Device& d) { return d.admitted(); }), "counter");
  metrics.AddGauge("tensorcompute_heap_bytes",
                   "The server's heap as its allocator counts it: in use (state=\"allocated\"), "
                   "and freed but kept mapped for reuse (state=\"free\").",
                   [] {
                     const HeapStats h = ReadHeapStats();
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
    return std::vector<std::pair<std::string, double>>{{"", static_cast<double>(resident.count())}};
  });
  metrics.AddGauge("tensorcompute_resident_bytes", "Bytes of resident tensors held.", [&resident] {
    return std::vector<std::pair<std::string, double>>{{"", static_cast<double>(resident.bytes())}};
  });
#if TC_WITH_CUDA
  // Expression kernels (NVRTC), shared by every GPU of the process.
  auto expr_stat = [](auto value) {
    return [value] {
      return std::vector<std::pair<std::string, double>>{
          {"", static_cast<double>(value(cuda::ExprKernelCache::Shared().stats()))}};
    };
  };
  using Stats = cuda::ExprCacheStats;
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
  metrics.AddGauge("tensorcompute_expression_stepwise_total",
                   "Expression requests run as their ops one by one while their kernel compiled.",
                   expr_stat([](const Stats& s) { return s.stepwise; }));
  metrics.AddGauge("tensorcompute_expression_compiles_refused_total",
                   "Expression requests refused because too many compilations were waiting.",
                   expr_stat([](const Stats& s) { return s.refused; }));
  metrics.AddGauge("tensorcompute_expression_disk_loads_total",
                   "Expression kernels loaded from --kernel_cache_dir instead of compiled.",
                   expr_stat([](const Stats& s) { return s.disk_loads; }));
  metrics.AddGauge(
      "tensorcompute_expression_disk_rejected_total",
      "Entries of --kernel_cache_dir refused (corrupt, truncated, foreign) and removed.",
      expr_stat([](const Stats& s) { return s.disk.rejected; }));
  metrics.AddGauge("tensorcompute_expression_kernels", "Expression kernels cached.",
                   expr_stat([](const Stats& s) { return s.entries; }));
#endif
  if (regions == nullptr) return;
  metrics.AddGauge("tensorcompute_regions", "Shared-memory regions registered.", [regions] {
    return std::vector<std::pair<std::string, double>>{{"", static_cast<double>(regions->count())}};
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
  metrics.AddGauge("tensorcompute_region_connections", "Connections open on the region socket.",
                   [regions] {
                     return std::vector<std::pair<std::string, double>>{
                         {"", static_cast<double>(regions->connections())}};
                   });
}

}  // namespace tc::server
