#include "server/worker/worker.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/engine.h"
#include "kernels/expr/program.h"
#include "server/worker/channel.h"
#include "tensorcompute/worker/worker.pb.h"

namespace tc::server::worker {
namespace {

namespace pb = ::tensorcompute::worker;

// The worker's allocations by address: every address the front door names is checked to lie
// inside one of them.
class Allocations {
 public:
  void Add(runtime::StoragePtr s) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto key = reinterpret_cast<uintptr_t>(s->data());
    by_address_[key] = std::move(s);
  }
  bool Remove(uint64_t address) {
    runtime::StoragePtr gone;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = by_address_.find(address);
      if (it == by_address_.end()) return false;
      gone = std::move(it->second);
      by_address_.erase(it);
    }
    return true;  // Freed here, outside the lock.
  }
  // The storage holding [address, address + bytes), and where in it that starts.
  absl::StatusOr<std::pair<runtime::StoragePtr, int64_t>> Find(uint64_t address,
                                                               int64_t bytes) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_address_.upper_bound(address);
    if (bytes >= 0 && it != by_address_.begin()) {
      --it;
      const uint64_t offset = address - it->first;
      const auto size = static_cast<uint64_t>(it->second->bytes());
      if (offset <= size && static_cast<uint64_t>(bytes) <= size - offset) {
        return std::make_pair(it->second, static_cast<int64_t>(offset));
      }
    }
    return absl::FailedPreconditionError(absl::StrCat("no storage of this device holds ", bytes,
                                                      " bytes at 0x", absl::Hex(address)));
  }

 private:
  mutable std::mutex mu_;
  std::map<uint64_t, runtime::StoragePtr> by_address_;
};

// Callers' shared memory the front door maps, mapped here too (MapHost), by the front door's
// address of it: bytes to and from it need no staging buffer.
class HostMaps {
 public:
  struct Mapping {
    std::byte* base = nullptr;
    int64_t bytes = 0;
    bool read_only = true;
    std::shared_ptr<void> pin;  // Null where the device did not pin it (the CPU).
    ~Mapping() {
      pin.reset();  // Unpinned before it is unmapped.
      if (base != nullptr) munmap(base, static_cast<size_t>(bytes));
    }
  };
  // Whether the device pinned it.
  absl::StatusOr<bool> Add(runtime::Device& device, uint64_t key, int fd, int64_t bytes,
                           bool read_only) {
    struct stat st {};
    if (bytes <= 0 || fstat(fd, &st) != 0 || st.st_size < bytes) {
      return absl::InvalidArgumentError("shared memory to map is not of the size given");
    }
    void* m = mmap(nullptr, static_cast<size_t>(bytes),
                   read_only ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat("mapping shared memory: ", strerror(errno)));
    }
    auto mapping = std::make_shared<Mapping>();
    mapping->base = static_cast<std::byte*>(m);
    mapping->bytes = bytes;
    mapping->read_only = read_only;
    if (runtime::HostMaps* maps = device.host_maps())
      mapping->pin = maps->PinHost(m, bytes, read_only);
    const bool pinned = mapping->pin != nullptr;
    std::shared_ptr<Mapping> before;  // Unmapped outside the lock.
    std::lock_guard<std::mutex> lock(mu_);
    before = std::exchange(by_key_[key], std::move(mapping));
    return pinned;
  }
  void Remove(uint64_t key) {
    std::shared_ptr<Mapping> gone;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_key_.find(key);
    if (it == by_key_.end()) return;
    gone = std::move(it->second);
    by_key_.erase(it);
  }
  // The mapping holding `bytes` at `at` of the one at `key` (kept while the caller holds it).
  absl::StatusOr<std::shared_ptr<Mapping>> Find(uint64_t key, int64_t at, int64_t bytes) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_key_.find(key);
    if (it == by_key_.end()) return absl::InternalError("no such mapped shared memory");
    if (at < 0 || bytes < 0 || at > it->second->bytes || bytes > it->second->bytes - at) {
      return absl::InternalError("outside the mapped shared memory");
    }
    return it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<Mapping>> by_key_;
};

AttrValue FromWire(const pb::Attr& a) {
  switch (a.value_case()) {
    case pb::Attr::kF:
      return a.f();
    case pb::Attr::kI:
      return static_cast<int64_t>(a.i());
    case pb::Attr::kB:
      return a.b();
    case pb::Attr::kDtype:
      return static_cast<DType>(a.dtype());
    case pb::Attr::kS:
      return a.s();
    default:
      return std::monostate{};
  }
}

bool ValidDType(int d) { return d >= 0 && d < kNumDTypes; }

// A GPU worker polls a connection this long after each reply for the next request (a request
// that finds its thread awake saves a wake-up, tens of microseconds on a large host), at most
// kMaxPolling connections at once. A CPU worker's cores are the compute's: it sleeps at once.
constexpr absl::Duration kPollFor = absl::Microseconds(300);
constexpr int kMaxPolling = 2;

// One connection from the front door: a lane of the device and a staging buffer. A request
// is answered when it is done: a run by the device's completion itself, without waking this
// connection's thread, which meanwhile waits for the next request (the front door sends one
// request at a time per connection).
class Connection {
 public:
  Connection(runtime::Device& device, Allocations& allocations, HostMaps& host_maps, int fd,
             std::byte* staging, int64_t staging_bytes)
      : device_(device),
        allocations_(allocations),
        host_maps_(host_maps),
        channel_(fd),
        staging_(staging),
        staging_bytes_(staging_bytes) {}
  ~Connection() { munmap(staging_, static_cast<size_t>(staging_bytes_)); }

  void Serve(PollGate* gate) {
    lane_ = device_.AcquireLane();
    // Pinned, copies to and from the staging buffer need no second staging (a GPU's).
    if (runtime::HostMaps* maps = device_.host_maps()) {
      pin_ = maps->PinHost(staging_, staging_bytes_, /*read_only=*/false);
    }
    if (!device_.host_memory()) channel_.set_spin(kPollFor, gate);
    pb::Request request;
    while (channel_.Receive(&request, &fds_).ok()) {
      WaitAnswered();
      for (uint64_t address : request.frees()) allocations_.Remove(address);
      for (uint64_t key : request.unmaps()) host_maps_.Remove(key);
      pb::Reply reply;
      std::optional<absl::Status> s = Handle(request, &reply);
      for (int fd : fds_) close(fd);
      fds_.clear();
      if (s.has_value() && !Answer(*s, &reply)) break;
    }
    WaitAnswered();
    pin_.reset();
    lane_.reset();
  }

 private:
  // Sends the reply of the request in hand; false where the front door has gone.
  bool Answer(const absl::Status& s, pb::Reply* reply) {
    reply->set_code(static_cast<int>(s.code()));
    reply->set_message(std::string(s.message()));
    reply->set_device_failed(device_.failed());
    const bool sent = channel_.Send(*reply, reply_fds_).ok();
    for (int fd : reply_fds_) close(fd);
    reply_fds_.clear();
    return sent;
  }
  // A reply that the device's completion is to send.
  std::function<void(absl::Status)> AnswerLater() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_ = true;
    }
    return [this](absl::Status s) {
      pb::Reply reply;
      (void)Answer(s, &reply);
      std::lock_guard<std::mutex> lock(mu_);
      pending_ = false;
      answered_.notify_all();
    };
  }
  void WaitAnswered() {
    std::unique_lock<std::mutex> lock(mu_);
    answered_.wait(lock, [this] { return !pending_; });
  }

  absl::Status CheckStaging(int64_t bytes, int64_t at = 0) const {
    if (bytes < 0 || at < 0 || at > staging_bytes_ || bytes > staging_bytes_ - at) {
      return absl::InternalError("transfer larger than the staging buffer");
    }
    return absl::OkStatus();
  }

  // The request's outcome, or nothing where the reply is to come from the device's completion.
  std::optional<absl::Status> Handle(const pb::Request& request, pb::Reply* reply) {
    switch (request.body_case()) {
      case pb::Request::kAllocate: {
        auto s = device_.Allocate(request.allocate().bytes(), request.allocate().zero(),
                                  absl::Now() + absl::Seconds(5), lane_.get());
        if (!s.ok()) return s.status();
        reply->set_data(reinterpret_cast<uintptr_t>((*s)->data()));
        allocations_.Add(*std::move(s));
        return absl::OkStatus();
      }
      case pb::Request::kWrite: {
        const auto& w = request.write();
        auto at = allocations_.Find(w.data() + static_cast<uint64_t>(w.offset()), w.bytes());
        if (!at.ok()) return at.status();
        if (w.has_host()) {
          auto m = host_maps_.Find(w.host().key(), w.host().at(), w.bytes());
          if (!m.ok()) return m.status();
          const std::byte* from = (*m)->base + w.host().at();
          if ((*m)->pin == nullptr) {
            return device_.Write(*lane_, *at->first, at->second, from, w.bytes());
          }
          // Done before the reply: the mapping may go once the front door has it.
          if (auto s = device_.WritePinned(*lane_, *at->first, at->second, from, w.bytes());
              !s.ok()) {
            return s;
          }
          return device_.Sync(*lane_);
        }
        if (auto s = CheckStaging(w.bytes(), w.staging_at()); !s.ok()) return s;
        const std::byte* from = staging_ + w.staging_at();
        if (pin_ == nullptr) return device_.Write(*lane_, *at->first, at->second, from, w.bytes());
        // Queued from the staging buffer itself: done before the front door fills it again.
        if (auto s = device_.WritePinned(*lane_, *at->first, at->second, from, w.bytes());
            !s.ok()) {
          return s;
        }
        return device_.Sync(*lane_);
      }
      case pb::Request::kRead: {
        const auto& r = request.read();
        if (auto s = CheckStaging(r.bytes(), r.staging_at()); !s.ok()) return s;
        auto at = allocations_.Find(r.data() + static_cast<uint64_t>(r.offset()), r.bytes());
        if (!at.ok()) return at.status();
        return device_.Read(*lane_, *at->first, at->second, staging_ + r.staging_at(), r.bytes());
      }
      case pb::Request::kCopy: {
        const auto& c = request.copy();
        auto dst = allocations_.Find(c.data() + static_cast<uint64_t>(c.offset()), c.bytes());
        if (!dst.ok()) return dst.status();
        auto src = allocations_.Find(c.src(), c.bytes());
        if (!src.ok()) return src.status();
        return device_.CopyFromDevice(*lane_, *dst->first, dst->second, device_,
                                      reinterpret_cast<const std::byte*>(c.src()), c.bytes());
      }
      case pb::Request::kSync:
        return device_.Sync(*lane_);
      case pb::Request::kShare: {
        const auto& sh = request.share();
        runtime::IpcMemory* ipc = device_.ipc();
        if (ipc == nullptr)
          return absl::UnimplementedError("this device does not share its memory");
        if (sh.pool()) {
          auto fd = ipc->ExportMemoryPool();
          if (!fd.ok()) return fd.status();
          reply_fds_.push_back(*fd);
          return absl::OkStatus();
        }
        auto at = allocations_.Find(sh.data(), sh.bytes());
        if (!at.ok()) return at.status();
        auto shared = ipc->ExportAllocation(at->first->data());
        if (!shared.ok()) return shared.status();
        reply->set_shared(*std::move(shared));
        reply->set_data(static_cast<uint64_t>(at->second));
        reply->set_bytes(at->first->bytes());
        return absl::OkStatus();
      }
      case pb::Request::kCopyShared: {
        const auto& c = request.copy_shared();
        auto dst = allocations_.Find(c.data() + static_cast<uint64_t>(c.offset()), c.bytes());
        if (!dst.ok()) return dst.status();
        runtime::IpcMemory* ipc = device_.ipc();
        if (ipc == nullptr) {
          return absl::UnimplementedError("this device does not import shared memory");
        }
        return ipc->CopyFromExported(*lane_, *dst->first, dst->second, c.pool_key(),
                                     fds_.empty() ? -1 : fds_[0], c.shared(), c.src_offset(),
                                     c.bytes());
      }
      case pb::Request::kMapHost: {
        const auto& m = request.map_host();
        if (fds_.size() != 1) return absl::InternalError("shared memory to map came without it");
        auto pinned = host_maps_.Add(device_, m.key(), fds_[0], m.bytes(), m.read_only());
        if (!pinned.ok()) return pinned.status();
        reply->set_data(*pinned ? 1 : 0);
        return absl::OkStatus();
      }
      case pb::Request::kUnshare: {
        const auto& u = request.unshare();
        if (runtime::IpcMemory* ipc = device_.ipc()) {
          ipc->ForgetExported(u.pool_key(), {u.shared().begin(), u.shared().end()}, u.pool());
        }
        return absl::OkStatus();
      }
      case pb::Request::kRun:
        return Run(request.run());
      case pb::Request::BODY_NOT_SET:
        return absl::OkStatus();  // Frees only.
      default:
        return absl::InternalError("unknown worker request");
    }
  }

  std::optional<absl::Status> Run(const pb::Request::Run& run) {
    std::vector<TensorView> views;
    views.reserve(static_cast<size_t>(run.inputs_size()));
    for (const pb::View& w : run.inputs()) {
      if (!ValidDType(w.dtype())) return absl::InternalError("bad dtype in a worker request");
      TensorView v;
      v.dtype = static_cast<DType>(w.dtype());
      v.shape.assign(w.shape().begin(), w.shape().end());
      v.strides.assign(w.strides().begin(), w.strides().end());
      v.offset = w.offset();
      v.storage_bytes = w.storage_bytes();
      if (run.small()) {
        // In the staging buffer, at this offset.
        if (v.storage_bytes < 0 || w.data() > static_cast<uint64_t>(staging_bytes_) ||
            static_cast<uint64_t>(v.storage_bytes) > staging_bytes_ - w.data()) {
          return absl::InternalError("a small request's input lies outside the staging buffer");
        }
        v.data = staging_ + w.data();
      } else {
        v.data = reinterpret_cast<const std::byte*>(w.data());
        if (v.storage_bytes > 0) {
          if (auto at = allocations_.Find(w.data(), v.storage_bytes); !at.ok()) {
            return at.status();
          }
        }
      }
      views.push_back(std::move(v));
    }
    if (!ValidDType(run.out_dtype())) return absl::InternalError("bad output dtype");
    OutputOptions output;
    output.dtype = static_cast<DType>(run.out_dtype());
    output.strides.assign(run.out_strides().begin(), run.out_strides().end());
    absl::StatusOr<PreparedOp> prepared;
    if (!run.expression().empty()) {
      std::vector<std::string> names(run.input_names().begin(), run.input_names().end());
      prepared = expr::PrepareExpression(run.expression(), names, views, output);
    } else {
      AttrMap attrs;
      for (const auto& [name, value] : run.attrs()) attrs[name] = FromWire(value);
      prepared = PrepareOp(run.op(), views, attrs, output, device_.tile_rule());
    }
    if (!prepared.ok()) return prepared.status();
    const int64_t out_bytes = prepared->plan.out_storage_bytes;
    if (run.small()) {
      if (run.out() > static_cast<uint64_t>(staging_bytes_) ||
          static_cast<uint64_t>(out_bytes) > staging_bytes_ - run.out()) {
        return absl::InternalError("a small request's output lies outside the staging buffer");
      }
      return RunSmall(*prepared, std::move(views), staging_ + run.out());
    }
    auto out = allocations_.Find(run.out(), out_bytes);
    if (!out.ok()) return out.status();
    const int64_t read_back = run.read_back();
    if (read_back < 0 || read_back > out_bytes) return absl::InternalError("bad read-back size");
    if (run.has_read_back_host()) {
      // Into a caller's shared memory mapped here: pinned, by the device with the run.
      auto m = host_maps_.Find(run.read_back_host().key(), run.read_back_host().at(), read_back);
      if (!m.ok()) return m.status();
      if ((*m)->read_only) return absl::InternalError("read-back into read-only shared memory");
      std::byte* host = (*m)->base + run.read_back_host().at();
      std::byte* out_at = reinterpret_cast<std::byte*>(run.out());
      if ((*m)->pin != nullptr) {
        device_.Run(*lane_, *prepared, std::move(views), out_at,
                    [later = AnswerLater(), keep = *m](absl::Status s) { later(std::move(s)); },
                    {host, read_back, /*pinned=*/true});
        return std::nullopt;
      }
      std::promise<absl::Status> finished;
      std::future<absl::Status> result = finished.get_future();
      device_.Run(*lane_, *prepared, std::move(views), out_at,
                  [&finished](absl::Status s) { finished.set_value(std::move(s)); });
      if (absl::Status s = result.get(); !s.ok()) return s;
      return device_.Read(*lane_, *out->first, out->second, host, read_back);
    }
    if (auto s = CheckStaging(read_back); !s.ok()) return s;
    runtime::ReadBack rb;
    const bool device_reads_back = read_back > 0 && read_back <= device_.max_read_back();
    if (device_reads_back) rb = {staging_, read_back, pin_ != nullptr};
    if (read_back == 0 || device_reads_back) {
      device_.Run(*lane_, *prepared, std::move(views), reinterpret_cast<std::byte*>(run.out()),
                  AnswerLater(), rb);
      return std::nullopt;
    }
    std::promise<absl::Status> finished;
    std::future<absl::Status> result = finished.get_future();
    device_.Run(
        *lane_, *prepared, std::move(views), reinterpret_cast<std::byte*>(run.out()),
        [&finished](absl::Status s) { finished.set_value(std::move(s)); }, rb);
    absl::Status s = result.get();
    if (!s.ok()) return s;
    return device_.Read(*lane_, *out->first, out->second, staging_, read_back);
  }

  // A small request whose inputs are in the staging buffer and whose output goes there.
  std::optional<absl::Status> RunSmall(const PreparedOp& op, std::vector<TensorView> views,
                                       std::byte* host_out) {
    const Plan& plan = op.plan;
    if (plan.out_has_gaps) std::memset(host_out, 0, static_cast<size_t>(plan.out_storage_bytes));
    if (device_.host_memory()) {
      device_.Run(*lane_, op, std::move(views), host_out, AnswerLater());
      return std::nullopt;
    }
    std::function<void(absl::Status)> later = AnswerLater();
    runtime::QuickRuns* quick = device_.quick_runs();
    if (quick != nullptr && quick->TryRunSmall(*lane_, op, views, host_out, later)) {
      return std::nullopt;
    }
    // Not taken: nothing will answer through `later`.
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_ = false;
    }
    std::promise<absl::Status> finished;
    std::future<absl::Status> result = finished.get_future();
    std::function<void(absl::Status)> done = [&finished](absl::Status s) {
      finished.set_value(std::move(s));
    };
    // The device's small path is busy: the ordinary way, within this process.
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    std::vector<runtime::StoragePtr> held;
    for (TensorView& v : views) {
      auto s = device_.Allocate(v.storage_bytes, false, deadline, lane_.get());
      if (!s.ok()) return s.status();
      if (auto w = device_.Write(*lane_, **s, 0, v.data, v.storage_bytes); !w.ok()) return w;
      v.data = (*s)->data();
      held.push_back(*std::move(s));
    }
    auto out = device_.Allocate(plan.out_storage_bytes, plan.out_has_gaps, deadline, lane_.get());
    if (!out.ok()) return out.status();
    const bool read_back = plan.out_storage_bytes <= device_.max_read_back();
    runtime::ReadBack rb;
    if (read_back) rb = {host_out, plan.out_storage_bytes, pin_ != nullptr};
    device_.Run(*lane_, op, std::move(views), (*out)->data(), done, rb);
    if (absl::Status s = result.get(); !s.ok() || read_back) return s;
    return device_.Read(*lane_, **out, 0, host_out, plan.out_storage_bytes);
  }

  runtime::Device& device_;
  Allocations& allocations_;
  HostMaps& host_maps_;
  Channel channel_;
  std::byte* staging_;
  int64_t staging_bytes_;
  std::unique_ptr<runtime::Lane> lane_;
  std::shared_ptr<void> pin_;
  // Descriptors that came with the request in hand, and those its reply carries.
  std::vector<int> fds_;
  std::vector<int> reply_fds_;
  std::mutex mu_;
  std::condition_variable answered_;
  bool pending_ = false;  // A completion is yet to send its reply.
};

}  // namespace

int WorkerMain(int control_fd, std::unique_ptr<runtime::Device> device) {
  // Signals meant for the server (a terminal's Ctrl-C reaches the whole process group) are
  // the front door's to act on: it drains, then closes this worker.
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  Channel control(control_fd);
  pb::Hello hello;
  const runtime::DeviceInfo& info = device->info();
  hello.set_kind(info.kind);
  hello.set_name(info.name);
  hello.set_index(info.index);
  hello.set_total_memory(info.total_memory);
  hello.set_multiprocessors(info.multiprocessors);
  hello.set_streams(info.streams);
  hello.set_uuid(info.uuid);
  hello.set_memory_budget(device->memory_budget());
  hello.set_tile_rule(static_cast<int>(device->tile_rule()));
  hello.set_max_read_back(device->max_read_back());
  if (!control.Send(hello).ok()) return 1;

  Allocations allocations;
  HostMaps host_maps;
  PollGate gate(kMaxPolling);
  pb::Request request;
  std::vector<int> fds;
  while (control.Receive(&request, &fds).ok()) {
    if (request.body_case() != pb::Request::kConnect || fds.size() != 2) {
      for (int fd : fds) close(fd);
      continue;
    }
    struct stat st {};
    void* staging = MAP_FAILED;
    if (fstat(fds[1], &st) == 0 && st.st_size > 0) {
      staging = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED,
                     fds[1], 0);
    }
    close(fds[1]);
    if (staging == MAP_FAILED) {
      close(fds[0]);
      continue;
    }
    auto c = std::make_shared<Connection>(*device, allocations, host_maps, fds[0],
                                          static_cast<std::byte*>(staging), st.st_size);
    std::thread([c, &gate] { c->Serve(&gate); }).detach();
  }
  // The front door has gone: nothing of this process is needed any more, and connections
  // still open may be blocked in the device. Leave without unwinding them.
  _exit(0);
}

}  // namespace tc::server::worker
