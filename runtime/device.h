// The runtime's view of where tensors live and ops run. A Device is the engine's interface to
// one place that computes (lanes, copies, runs: what a backend implements) together with
// what the server keeps for it whatever the backend: its memory budget (memory_budget.h),
// the requests admitted to it (admission.h) and whether it still serves (health.h). The CPU
// device runs the same engine on host memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kernels/engine.h"
#include "runtime/admission.h"
#include "runtime/health.h"
#include "runtime/memory_budget.h"

namespace tc::runtime {

class Device;

// Bytes on one device (TH's StorageImpl), counted against the device's budget until the last
// reference goes away.
class Storage {
 public:
  // `tag`: the device's note on how the memory was allocated, handed back when freeing it.
  Storage(Device* device, std::byte* data, int64_t bytes, void* tag = nullptr);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  std::byte* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  Device& device() const { return *device_; }
  // The device's health, or UNAVAILABLE where the device has started over since (a worker
  // process replaced after a fault): these bytes went with the one before.
  absl::Status usable() const;
  // The device's generation the bytes belong to (Device::generation()).
  int64_t generation() const { return generation_; }

 private:
  Device* device_;
  std::byte* data_;
  int64_t bytes_;
  void* tag_;
  int64_t generation_;
};
using StoragePtr = std::shared_ptr<Storage>;

// One request's ordered queue of work on a device (a CUDA stream). Lanes may be shared by
// several requests; work on one lane runs in the order it was issued.
class Lane {
 public:
  virtual ~Lane() = default;
};

struct DeviceInfo {
  std::string kind;  // "cpu" or "cuda"
  std::string name;
  int index = 0;
  int64_t total_memory = 0;
  int multiprocessors = 0;
  int streams = 0;
  // 32 hex digits for a GPU (what CUDA and nvidia-smi call its UUID); empty for the CPU.
  std::string uuid;
  // Indices of the other devices whose memory this one reads and writes directly (peer access,
  // over NVLink or PCIe); copies from the rest go through the host.
  std::vector<int> peers;
};

// Device memory another process on this host shares (CUDA IPC), opened in this process: the
// allocation's start and extent, and what closes it when the last user lets go.
struct SharedDeviceMemory {
  std::byte* data = nullptr;
  int64_t bytes = 0;
  std::shared_ptr<void> closer;
};

// Where Device::Run copies the output to the host itself before `done`, for small outputs.
struct ReadBack {
  void* host = nullptr;
  int64_t bytes = 0;
  // `host` lies in memory pinned by HostMaps::PinHost: copied there directly, any size.
  bool pinned = false;
};

struct DeviceOptions {
  // Bytes the device may hand out; 0: a default fraction of its memory.
  int64_t memory_budget = 0;
  // How long an allocation waits for others to free memory before RESOURCE_EXHAUSTED.
  absl::Duration memory_wait = absl::Milliseconds(200);
  // CUDA streams (lanes) per device.
  int streams = 4;
  // Pinned staging buffer size; two per lane.
  int64_t staging_bytes = int64_t{4} << 20;
  // Host threads that move a large copy into and out of the staging buffers together (one
  // thread's memcpy runs well under PCIe's rate); 0: half the hardware threads, at most 8.
  int copy_threads = 0;
  // Test only: the device fails as it starts this many-th run (0: never). On a GPU the run
  // launches a kernel that traps, a real fault that leaves the CUDA context unusable; on the
  // CPU the run reports an internal error.
  int64_t inject_fault_at_run = 0;
  // Test only: the index the device reports (DeviceInfo.index) when it is not the GPU's own,
  // for two devices sharing one GPU. -1: the GPU's.
  int report_index = -1;
  // Other processes may map this device's memory (ExportMemoryPool): a worker process's
  // device, whose storage other workers copy from.
  bool shareable_memory = false;
};

// Optional capabilities: a device has each or has none of it (Device::host_maps(), ipc(),
// quick_runs() are null), and stubs nothing it does not have.

// Host memory the server maps from its callers (shared-memory regions), reached by the
// device's copies without staging.
class HostMaps {
 public:
  virtual ~HostMaps() = default;
  // Pins such memory so that copies to and from it need no staging; unpinned when the
  // returned handle goes. Null where pinning failed: copies then stage as usual.
  virtual std::shared_ptr<void> PinHost(void* p, int64_t n, bool read_only) = 0;
  // The same for such memory that is a file (`fd`, a memfd, valid for the call): a device of
  // another process maps the file there too. Whether a device needs its own (`PinHost` of one
  // device of this process serves them all): maps_shared_memory_itself().
  virtual std::shared_ptr<void> MapShared(void* p, int64_t n, bool read_only, int /*fd*/) {
    return PinHost(p, n, read_only);
  }
  virtual bool maps_shared_memory_itself() const { return false; }
  // Whether the device reaches `n` bytes at `host` directly (WritePinned from there, a pinned
  // ReadBack into it): true for memory PinHost or MapShared pinned for it.
  virtual bool Reaches(const void* /*host*/, int64_t /*n*/) const { return true; }
};

// GPU memory shared between processes: memory another process offers through CUDA IPC,
// opened here, and storage shared with another process of the server (a worker's device with
// another's), device to device without the host.
class IpcMemory {
 public:
  virtual ~IpcMemory() = default;
  // Opens memory another process shares (`handle`: a cudaIpcMemHandle_t's bytes).
  virtual absl::StatusOr<SharedDeviceMemory> OpenIpc(absl::string_view handle) = 0;
  // The exporting side: a descriptor of the device's memory pool (owned by the caller), and
  // what names the allocation that starts at `p`.
  virtual absl::StatusOr<int> ExportMemoryPool() = 0;
  virtual absl::StatusOr<std::string> ExportAllocation(const std::byte* p) = 0;
  // The importing side copies `n` bytes from `src_offset` of such an allocation into `dst` at
  // `offset` (its range checked here: OUT_OF_RANGE past the storage's end), done when it
  // returns; it imports the pool once per `pool_key` (`pool_fd`, owned by the caller, may be
  // -1 where it was sent before). FAILED_PRECONDITION where there is no path between the two
  // devices: the caller then copies through the host.
  absl::Status CopyFromExported(Lane& lane, Storage& dst, int64_t offset,
                                const std::string& pool_key, int pool_fd,
                                const std::string& allocation, int64_t src_offset, int64_t n);
  // The importing side keeps an allocation mapped from one copy to the next: the exporter
  // may free it only once this has returned here for it. Lets go of the allocations named
  // in `allocations` of the pool `pool_key`, or, where `whole_pool`, of every one of them
  // and of the pool itself (its exporter is gone).
  virtual void ForgetExported(const std::string& pool_key,
                              const std::vector<std::string>& allocations, bool whole_pool) = 0;

 protected:
  virtual absl::Status DoCopyFromExported(Lane& lane, Storage& dst, int64_t offset,
                                          const std::string& pool_key, int pool_fd,
                                          const std::string& allocation, int64_t src_offset,
                                          int64_t n) = 0;
};

// Runs that take a shorter road than Device::Run from a thread that may wait.
class QuickRuns {
 public:
  virtual ~QuickRuns() = default;
  // For small requests: runs `op` straight from host memory (`host_inputs` point at the
  // host) into `host_out` (op.plan.out_storage_bytes), packing inputs and output into one
  // staging buffer and one device block. Never waits: returns false, leaving `done` unused,
  // when it cannot start at once (too large, no free result slot), and the caller takes the
  // ordinary path. Otherwise `done` is taken as with Run.
  // Its memory is set aside when the device starts, outside the budget.
  virtual bool TryRunSmall(Lane& lane, const PreparedOp& op,
                           const std::vector<TensorView>& host_inputs, std::byte* host_out,
                           std::function<void(absl::Status)>& done) = 0;
  // The most bytes (inputs, output and padding) TryRunSmall takes.
  virtual int64_t max_small_bytes() const = 0;
  // Run, where it starts at once and the caller need not wait: false, leaving `done` unused,
  // where it would first wait (no free result slot, a kernel still to compile) or fail; the
  // caller then calls Run from a thread that may wait. Otherwise `done` is taken as with Run.
  virtual bool TryRun(Lane& /*lane*/, const PreparedOp& /*op*/,
                      const std::vector<TensorView>& /*inputs*/, std::byte* /*out*/,
                      std::function<void(absl::Status)>& /*done*/) {
    return false;
  }
};

class Device {
 public:
  // The budget comes resolved (the options' 0 replaced by the device's default); the memory
  // wait and the test-only fault injection come from `options`.
  Device(DeviceInfo info, int64_t budget, const DeviceOptions& options);
  virtual ~Device() = default;

  const DeviceInfo& info() const { return info_; }
  // True when storage is plain host memory (the CPU device): requests then compute on their
  // message bytes directly.
  virtual bool host_memory() const = 0;
  // The rule plans for this device are made with (its tile kernel's reach).
  virtual TileRule tile_rule() const { return TileRule::kDense; }

  // `bytes` of storage (zeroed when `zero`), waiting until `deadline` (at most the device's
  // memory wait) for memory that others free; RESOURCE_EXHAUSTED past the budget. With a
  // lane, the memory is ready in that lane's order (no wait); use it elsewhere only after a
  // Sync of that lane. Without one, it is ready everywhere when this returns.
  absl::StatusOr<StoragePtr> Allocate(int64_t bytes, bool zero, absl::Time deadline,
                                      Lane* lane = nullptr);

  // Counts `bytes` against the budget without allocating them, as Allocate would (waiting, then
  // RESOURCE_EXHAUSTED), until the returned handle goes: for host memory a request fills on
  // the way to the device (bytes read out of a caller's shared memory). The handle must not
  // outlive the device.
  absl::StatusOr<std::shared_ptr<void>> Reserve(int64_t bytes, absl::Time deadline);

  // --- The engine: lanes, copies, runs (what a backend implements).

  virtual std::unique_ptr<Lane> AcquireLane() = 0;
  // The copies below check their range here, once: OUT_OF_RANGE where the bytes would reach
  // outside the storage (or a negative offset or length); the backend's Do* then moves them.
  //
  // Host -> storage: returns once `src` may be reused; the bytes arrive in lane order (Sync
  // waits for them).
  absl::Status Write(Lane& lane, Storage& dst, int64_t offset, const void* src, int64_t n);
  // Host pieces laid end to end from `offset` (a message's bytes as gRPC received them, in
  // slices): as Write of their concatenation, without making it.
  struct HostPiece {
    const void* data;
    int64_t bytes;
  };
  absl::Status WritePieces(Lane& lane, Storage& dst, int64_t offset,
                           const std::vector<HostPiece>& pieces);
  // `n` bytes at `src` in memory of device `from` (another device of this server, or this one)
  // -> storage, in lane order (Sync waits for them). The bytes must be final: nothing may
  // still be writing them. Between GPUs a peer copy (direct where the two have peer access,
  // else through the host); between devices on host memory, a plain copy.
  absl::Status CopyFromDevice(Lane& lane, Storage& dst, int64_t offset, const Device& from,
                              const std::byte* src, int64_t n);
  // Storage -> host, in lane order: returns once the bytes are in `dst`.
  absl::Status Read(Lane& lane, const Storage& src, int64_t offset, void* dst, int64_t n);
  // The same into memory the device reaches directly (Reaches(dst, n): pinned by
  // HostMaps::PinHost), without staging.
  absl::Status ReadPinned(Lane& lane, const Storage& src, int64_t offset, void* dst, int64_t n);
  // Write from memory pinned by HostMaps::PinHost: queued on the lane without staging (Sync waits
  // for it). `src` must stay valid until then.
  absl::Status WritePinned(Lane& lane, Storage& dst, int64_t offset, const void* src, int64_t n);
  // Waits for everything issued on the lane so far.
  virtual absl::Status Sync(Lane& lane) = 0;

  // The optional capabilities the device has; null where it has none.
  HostMaps* host_maps() const { return host_maps_; }
  IpcMemory* ipc() const { return ipc_; }
  QuickRuns* quick_runs() const { return quick_runs_; }
  // Whether the device reaches `n` bytes at `host` directly: a device on host memory does;
  // a GPU where its HostMaps says so.
  bool Reaches(const void* host, int64_t n) const {
    return host_maps_ != nullptr ? host_maps_->Reaches(host, n) : host_memory();
  }

  using ReadBack = runtime::ReadBack;
  // The largest ReadBack Run accepts (0: none; read with Read instead).
  virtual int64_t max_read_back() const { return 0; }

  // Runs `op` over `inputs` (views whose data point at this device's memory) into `out`
  // (laid out as op.plan.out_strides, op.plan.out_storage_bytes long), then copies `read_back`
  // (at most max_read_back() bytes of `out`) to the host. `done` is called once, perhaps
  // before Run returns, perhaps on another thread; it may block and call the device.
  virtual void Run(Lane& lane, const PreparedOp& op, std::vector<TensorView> inputs, std::byte* out,
                   std::function<void(absl::Status)> done, ReadBack read_back = {}) = 0;

  // --- What the server keeps for the device, whatever its backend.

  // A device that hit an error it cannot recover from (on a GPU, a sticky CUDA error after
  // which its context is unusable) fails every later request with UNAVAILABLE and this
  // status's message; memory still comes back as requests and handles go. OK while usable.
  absl::Status health() const;
  bool failed() const { return health_.failed(); }
  // Records the first unrecoverable error and tells the listener (once, on the thread that
  // saw the error, with no lock held).
  void MarkFailed(const absl::Status& why);
  // Set before any request runs.
  void set_failure_listener(std::function<void(const Device&, const absl::Status&)> f) {
    on_failure_ = std::move(f);
  }
  // A device that can start over after a failure (one served by a worker process, replaced
  // when it fails): true. Otherwise a failure lasts until the server restarts.
  virtual bool recovers() const { return false; }
  // The device serves again after a failure, as a new generation: storage of the ones before
  // is lost (Storage::usable). Tells the recovery listener.
  void MarkRecovered();
  void set_recovery_listener(std::function<void(const Device&)> f) { on_recovery_ = std::move(f); }
  // Times the device started over (0 for one that never did).
  int64_t generation() const { return generation_.load(std::memory_order_acquire); }
  // The process that computes for the device (0: this one).
  virtual int worker_pid() const { return 0; }

  int64_t memory_budget() const { return memory_.limit(); }
  int64_t memory_in_use() const { return memory_.in_use(); }
  int64_t memory_peak() const { return memory_.peak(); }

  // Requests admitted to this device and not finished: placement and the per-device limit.
  int in_flight() const { return admissions_.in_flight(); }
  // Admits one request unless `limit` are in flight already; its slot comes back when the
  // Admission goes. Empty (nothing admitted) at the limit.
  std::optional<Admission> TryAdmit(int limit) {
    if (!admissions_.TryAdmit(limit)) return std::nullopt;
    return Admission(&admissions_);
  }
  // Requests admitted so far.
  int64_t admitted() const { return admissions_.admitted(); }

 protected:
  // What a backend implements of the copies above, their ranges checked.
  virtual absl::Status DoWrite(Lane& lane, Storage& dst, int64_t offset, const void* src,
                               int64_t n) = 0;
  virtual absl::Status DoWritePieces(Lane& lane, Storage& dst, int64_t offset,
                                     const std::vector<HostPiece>& pieces);
  // Between devices on host memory, a plain copy; UNIMPLEMENTED otherwise.
  virtual absl::Status DoCopyFromDevice(Lane& lane, Storage& dst, int64_t offset,
                                        const Device& from, const std::byte* src, int64_t n);
  virtual absl::Status DoRead(Lane& lane, const Storage& src, int64_t offset, void* dst,
                              int64_t n) = 0;
  virtual absl::Status DoReadPinned(Lane& lane, const Storage& src, int64_t offset, void* dst,
                                    int64_t n) {
    return DoRead(lane, src, offset, dst, n);
  }
  virtual absl::Status DoWritePinned(Lane& lane, Storage& dst, int64_t offset, const void* src,
                                     int64_t n) {
    return DoWrite(lane, dst, offset, src, n);
  }
  // The raw allocator: RESOURCE_EXHAUSTED when the memory is not there, any other error when
  // the device could not allocate at all (a failed GPU context). `tag` is kept with the
  // storage and passed back to RawFree.
  virtual absl::StatusOr<std::byte*> RawAllocate(int64_t bytes, bool zero, Lane* lane,
                                                 void** tag) = 0;
  virtual void RawFree(std::byte* p, int64_t bytes, void* tag) = 0;
  // Counts a run; true for the one run where a test asked for a fault.
  bool InjectFaultNow() { return fault_.Now(); }
  // For the CPU device, the budget default and the info come from the subclass.
  DeviceInfo info_;
  // A backend's constructor names the capabilities it has.
  void Offer(HostMaps* host_maps, IpcMemory* ipc, QuickRuns* quick_runs) {
    host_maps_ = host_maps;
    ipc_ = ipc;
    quick_runs_ = quick_runs;
  }

 private:
  friend class Storage;
  void Free(std::byte* p, int64_t bytes, void* tag);
  // Counts n bytes in use, waiting for room until `deadline` (at most the memory wait).
  absl::Status Charge(int64_t n, absl::Time deadline);

  MemoryBudget memory_;
  AdmissionCount admissions_;
  Health health_;
  FaultInjection fault_;
  std::function<void(const Device&, const absl::Status&)> on_failure_;
  std::function<void(const Device&)> on_recovery_;
  std::atomic<int64_t> generation_{0};
  HostMaps* host_maps_ = nullptr;
  IpcMemory* ipc_ = nullptr;
  QuickRuns* quick_runs_ = nullptr;
};

// The devices a server uses. Requests go to the least loaded one unless resident inputs pin
// them.
class DeviceSet {
 public:
  explicit DeviceSet(std::vector<std::unique_ptr<Device>> devices);
  int size() const { return static_cast<int>(devices_.size()); }
  Device& at(int i) const { return *devices_[i]; }
  // The rule requests are planned with before their device is chosen: the devices' own
  // where they agree (every device of a server runs one backend), else the one every
  // backend's tile kernel takes (TileRule::kDense).
  TileRule tile_rule() const { return tile_rule_; }
  // The device with the fewest requests in flight (then one not nearly out of budget); ties
  // taken in turn, so that requests that never overlap still spread. Failed devices only when
  // every device has failed.
  Device& LeastLoaded() const;
  // Devices that have not failed.
  int usable() const;
  // Whether a device has failed that only a server restart brings back (one without a worker
  // process to replace).
  bool needs_restart() const;

 private:
  std::vector<std::unique_ptr<Device>> devices_;
  TileRule tile_rule_ = TileRule::kDense;
  mutable std::atomic<unsigned> next_{0};
};

// Human-readable byte count: "1.5 GiB".
std::string FormatBytes(int64_t bytes);

}  // namespace tc::runtime
