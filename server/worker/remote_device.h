// A device computed for by a worker process of its own (worker.h), behind the front door. A
// GPU fault ends every CUDA context of the process it happens in; with each GPU in its own
// worker it ends only that worker: the device fails its own requests and tensors, the
// others keep serving, and a new worker takes its place (after a backoff, while the device
// reports its failure).
//
// What the server keeps for a device (its memory budget, admissions, health) stays here; the
// engine's interface goes to the worker: storage addresses are the worker's, bytes move
// through a staging buffer both processes map, and a run is prepared again in the worker from
// the op (or expression), attributes, views and planned output the front door prepared it
// from.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/device.h"

namespace tensorcompute::worker {
class Request;
class Reply;
}  // namespace tensorcompute::worker

namespace tc::server::worker {

class Channel;

// How to start a worker: the server's own arguments (flags shared with the worker: backend,
// budget, threads...), to which the worker's are added.
struct WorkerLaunch {
  std::vector<std::string> server_args;
  // The device's place in the server's list: the GPU ordinal, or the CPU part.
  int index = 0;
};

class RemoteDevice final : public runtime::Device,
                           public runtime::HostMaps,
                           public runtime::QuickRuns {
 public:
  // Starts the worker and waits for its device to come up.
  static absl::StatusOr<std::unique_ptr<RemoteDevice>> Start(const WorkerLaunch& launch,
                                                             const runtime::DeviceOptions& options);
  ~RemoteDevice() override;

  bool host_memory() const override { return false; }
  TileRule tile_rule() const override { return tile_rule_; }
  bool recovers() const override { return true; }
  int worker_pid() const override;

  std::unique_ptr<runtime::Lane> AcquireLane() override;
  absl::Status Sync(runtime::Lane& lane) override;
  int64_t max_read_back() const override { return staging_bytes_; }
  // A caller's shared memory is mapped by the worker as well (`fd` passed to it): writes
  // from it and read-backs into it need no staging buffer. Memory that is no file cannot
  // reach the worker: PinHost pins nothing.
  std::shared_ptr<void> PinHost(void* /*p*/, int64_t /*n*/, bool /*read_only*/) override {
    return nullptr;
  }
  std::shared_ptr<void> MapShared(void* p, int64_t n, bool read_only, int fd) override;
  bool maps_shared_memory_itself() const override { return true; }
  bool Reaches(const void* host, int64_t n) const override;
  // Inputs and output through the staging buffer, in one round trip.
  bool TryRunSmall(runtime::Lane& lane, const PreparedOp& op,
                   const std::vector<TensorView>& host_inputs, std::byte* host_out,
                   std::function<void(absl::Status)>& done) override;
  int64_t max_small_bytes() const override { return staging_bytes_; }
  void Run(runtime::Lane& lane, const PreparedOp& op, std::vector<TensorView> inputs,
           std::byte* out, std::function<void(absl::Status)> done,
           runtime::ReadBack read_back = {}) override;

  struct Connection;
  struct Worker;

 protected:
  absl::Status DoWrite(runtime::Lane& lane, runtime::Storage& dst, int64_t offset, const void* src,
                       int64_t n) override;
  absl::Status DoCopyFromDevice(runtime::Lane& lane, runtime::Storage& dst, int64_t offset,
                                const runtime::Device& from, const std::byte* src,
                                int64_t n) override;
  absl::Status DoRead(runtime::Lane& lane, const runtime::Storage& src, int64_t offset, void* dst,
                      int64_t n) override;
  absl::Status DoWritePinned(runtime::Lane& lane, runtime::Storage& dst, int64_t offset,
                             const void* src, int64_t n) override;
  absl::StatusOr<std::byte*> RawAllocate(int64_t bytes, bool zero, runtime::Lane* lane,
                                         void** tag) override;
  void RawFree(std::byte* p, int64_t bytes, void* tag) override;

 private:
  RemoteDevice(const WorkerLaunch& launch, std::unique_ptr<Worker> worker, int64_t budget,
               const runtime::DeviceOptions& options);

  // A connection of the current worker: an idle one, else a new one.
  absl::StatusOr<std::shared_ptr<Connection>> Take() const;
  void Give(std::shared_ptr<Connection> c) const;
  // `bytes` of device memory at `src` -> host, through a connection of this device's.
  absl::Status ReadAddress(const std::byte* src, int64_t n, std::byte* dst) const;
  // The same through connection `c`, a staging buffer's worth at a time.
  absl::Status ReadVia(Connection& c, const std::byte* src, int64_t n, std::byte* dst) const;
  // One request and its reply on `c` (the frees waiting go along); a lost worker or a device
  // fault marks the device failed.
  absl::Status Call(Connection& c, ::tensorcompute::worker::Request& request,
                    ::tensorcompute::worker::Reply* reply, const std::vector<int>& send_fds = {},
                    std::vector<int>* reply_fds = nullptr) const;
  // Device to device from another worker's device: `n` bytes at `src` there -> `dst` at
  // `offset`, the bytes never leaving the GPUs. FAILED_PRECONDITION or UNIMPLEMENTED where
  // the two cannot (the caller copies through the host).
  absl::Status CopyShared(runtime::Lane& lane, runtime::Storage& dst, int64_t offset,
                          const RemoteDevice& from, const std::byte* src, int64_t n);
  // This device's memory pool as a descriptor (the caller's to close; exported once per
  // worker, asked through `c`), and the key that names it.
  absl::StatusOr<int> SharedPool(Connection& c, std::string* key) const;
  // What names the pool of this device's worker of generation `g` to an importer.
  std::string PoolKey(int64_t g) const;
  // The exporting side of CopyShared: the allocation holding `n` bytes at `src` (asked of
  // the worker once per allocation), the key and a descriptor of its pool, and where in it
  // the bytes start. Records `importer` (its worker of generation `importer_generation`) as
  // keeping it mapped: the allocation is freed only once every importer let go of it.
  struct SharedRange {
    std::string pool_key;
    std::string shared;
    int64_t offset = 0;
    int pool_fd = -1;  // The caller's to close.
  };
  absl::StatusOr<SharedRange> ShareWith(const std::byte* src, int64_t n,
                                        const RemoteDevice* importer,
                                        int64_t importer_generation) const;
  // The importing side: tells this device's worker of generation `generation` to let go of an
  // allocation (`shared`) of the pool `pool_key`, or of the whole pool; `then` (may be empty)
  // runs once it has, or once no worker of that generation is left.
  struct PendingUnshare {
    int64_t generation = 0;
    std::string pool_key;
    std::string shared;
    bool pool = false;
    std::function<void()> then;
  };
  void QueueUnshare(PendingUnshare u) const;
  // Sends the Unshare requests queued (from the supervisor).
  void SendUnshares();
  // After the worker of generation `g` is gone: its importers let go of its pool.
  void ForgetExports(int64_t g);
  // The mapping (its id, where in it) of shared memory holding `n` bytes at `p`.
  absl::StatusOr<std::pair<uint64_t, int64_t>> FindHost(const void* p, int64_t n) const;
  // Has the worker behind `c` map the shared memory of id `id` (once per worker).
  absl::Status MapHost(Connection& c, uint64_t id) const;
  // The caller's shared memory at `key` let go of: unmapped with the next request.
  void UnmapHost(uint64_t key);
  // Storage of generation `g` let go of: freed with the next request.
  void QueueFree(uint64_t address, int64_t g);
  // Sends the frees waiting, where no request has taken them along for a while.
  void FlushFrees();
  // Moves some of the frees waiting for `c`'s worker into `request`.
  void TakeFrees(const Connection& c, ::tensorcompute::worker::Request& request) const;
  // The worker of generation `generation` stopped or its device failed: the device fails,
  // unless a newer worker has taken its place.
  void Lost(int64_t generation, const absl::Status& why) const;
  // The Run message of `op` over `inputs` into `out`.
  static void Describe(const PreparedOp& op, const std::vector<TensorView>& inputs,
                       ::tensorcompute::worker::Request* request);
  // Sends `request` on `c` without waiting for its reply (a write or read of a pipeline).
  absl::Status Post(Connection& c, ::tensorcompute::worker::Request& request) const;
  // Receives the reply of the oldest request posted on `c`, and what it means.
  absl::Status ReceiveOne(Connection& c) const;
  // Receives every reply still due on `c`: the first failure among them, if any.
  absl::Status Settle(Connection& c) const;
  // What a reply on `c` means, `io` being how receiving it went.
  absl::Status Outcome(const Connection& c, const absl::Status& io,
                       const ::tensorcompute::worker::Reply& reply) const;
  // Sends `request` on `connection` without waiting: its reply is received by Complete(),
  // which copies `bytes` from the staging buffer at `staging_at` to `host`, then calls `done`.
  void Send(std::shared_ptr<Connection> connection, ::tensorcompute::worker::Request& request,
            std::byte* host, int64_t staging_at, int64_t bytes,
            std::function<void(absl::Status)> done);
  // Receives the replies of runs in flight (Run does not wait for its own) and finishes them.
  void Complete();
  // Restarts the worker after a failure, with a backoff.
  void Supervise();

  const WorkerLaunch launch_;
  const int64_t staging_bytes_;
  TileRule tile_rule_;

  mutable std::mutex mu_;
  mutable std::condition_variable wake_;
  bool stopping_ = false;
  std::unique_ptr<Worker> worker_;
  mutable std::vector<std::shared_ptr<Connection>> idle_;
  // Storage let go of, to be freed by the worker of generation frees_generation_: a free needs
  // no round trip of its own.
  // The current worker's pool (SharedPool) and the devices no storage could be shared from.
  mutable std::mutex share_mu_;
  mutable int pool_fd_ = -1;
  mutable int64_t pool_generation_ = -1;
  std::vector<const RemoteDevice*> unshared_;
  // Allocations of the worker of pool_generation_ that other workers keep mapped, by
  // address, and every importer of its pool (device, that device's worker generation).
  using Importers = std::vector<std::pair<const RemoteDevice*, int64_t>>;
  struct Exported {
    int64_t bytes = 0;
    std::string shared;
    Importers importers;
  };
  mutable std::map<uint64_t, Exported> exported_;
  mutable Importers pool_importers_;
  // Unshare requests for this device's worker, sent by the supervisor.
  mutable std::mutex unshare_mu_;
  mutable std::vector<PendingUnshare> unshares_;
  mutable std::mutex frees_mu_;
  mutable std::vector<uint64_t> frees_;
  mutable int64_t frees_generation_ = 0;
  // Shared memory let go of, to be unmapped by the worker of generation unmaps_generation_.
  mutable std::vector<uint64_t> unmaps_;
  mutable int64_t unmaps_generation_ = 0;
  // Callers' shared memory the worker maps too, by the front door's address of it: its size,
  // a descriptor of it (for a new worker), and the worker generation that has it mapped.
  struct HostMap {
    int64_t bytes = 0;
    bool read_only = true;
    int fd = -1;
    int64_t generation = -1;
    // What names it to the worker: never reused (an address may be, by a later region).
    uint64_t id = 0;
  };
  mutable std::mutex host_mu_;
  mutable std::map<uint64_t, HostMap> host_maps_;
  mutable uint64_t host_ids_ = 0;
  std::thread supervisor_;
  // Connections whose run's reply is awaited, by descriptor; Complete() watches them.
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // An eventfd that stops Complete().
  std::mutex watch_mu_;
  std::map<int, std::shared_ptr<Connection>> watched_;
  bool completer_stopped_ = false;     // Under watch_mu_: Send finishes its run itself.
  std::atomic<bool> flushing_{false};  // A FlushFrees is in flight.
  std::atomic<int> in_flight_{0};      // Runs sent whose reply Complete() has yet to finish.
  std::thread completer_;
};

}  // namespace tc::server::worker
