#include "runtime/cpu_device.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/launch_env.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/store_path.h"

namespace tc::runtime {

int64_t PhysicalMemoryBytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
}

namespace {

DeviceInfo CpuInfo(int threads, int index) {
  DeviceInfo info;
  info.kind = "cpu";
  info.index = index;
  const unsigned hw = std::thread::hardware_concurrency();
  // The loops' vector level and how large outputs are written are the machine's
  // (kernels/cpu/isa.h, store_path.h): said here so that a device listing tells which paths a
  // server's figures came from.
  const cpu::StorePath& stores = cpu::LargeOutputStores();
  info.name =
      absl::StrCat("host CPU, ", threads > 0 ? threads : static_cast<int>(hw), " compute threads, ",
                   cpu::IsaName(cpu::ProcessIsa()), " loops, large outputs in ",
                   stores.streaming ? "streaming" : "plain", " stores (", stores.decided_by, ")");
  info.total_memory = PhysicalMemoryBytes();
  info.multiprocessors = static_cast<int>(hw);
  return info;
}

}  // namespace

CpuDevice::CpuDevice(int threads, const DeviceOptions& options, int index)
    : Device(CpuInfo(threads, index),
             options.memory_budget > 0 ? options.memory_budget : PhysicalMemoryBytes() / 2,
             options),
      pool_(ThreadPool::WorkersFor(threads)) {}

absl::StatusOr<std::byte*> CpuDevice::RawAllocate(int64_t bytes, bool zero, Lane* /*lane*/,
                                                  void** /*tag*/) {
  // calloc takes fresh zero pages from the kernel for large sizes, without touching them.
  void* p =
      zero ? std::calloc(static_cast<size_t>(bytes), 1) : std::malloc(static_cast<size_t>(bytes));
  if (p == nullptr) return absl::ResourceExhaustedError("malloc failed");
  return static_cast<std::byte*>(p);
}

void CpuDevice::RawFree(std::byte* p, int64_t /*bytes*/, void* /*tag*/) { std::free(p); }

absl::Status CpuDevice::DoWrite(Lane& /*lane*/, Storage& dst, int64_t offset, const void* src,
                                int64_t n) {
  std::memcpy(dst.data() + offset, src, static_cast<size_t>(n));
  return absl::OkStatus();
}

absl::Status CpuDevice::DoRead(Lane& /*lane*/, const Storage& src, int64_t offset, void* dst,
                               int64_t n) {
  std::memcpy(dst, src.data() + offset, static_cast<size_t>(n));
  return absl::OkStatus();
}

void CpuDevice::Run(Lane& /*lane*/, const PreparedOp& op, std::vector<TensorView> inputs,
                    std::byte* out, std::function<void(absl::Status)> done, ReadBack /*unused*/) {
  if (failed()) {
    done(health());
    return;
  }
  if (InjectFaultNow()) {
    const absl::Status fault = absl::InternalError("injected device fault (test only)");
    MarkFailed(fault);
    done(fault);
    return;
  }
  // Storage is host memory: there is nothing to read back.
  done(cpu::Run(op, out, inputs, cpu::LaunchEnv{&pool_}));
}

}  // namespace tc::runtime
