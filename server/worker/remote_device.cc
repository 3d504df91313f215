#include "server/worker/remote_device.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "kernels/expr/program.h"
#include "server/env/log.h"
#include "server/worker/channel.h"
#include "tensorcompute/worker/worker.pb.h"

extern char** environ;

namespace tc::server::worker {

namespace pb = ::tensorcompute::worker;

namespace {

// How long a worker's device may take to come up (a GPU's first context: seconds).
constexpr int kStartTimeoutMs = 120000;
// The wait before a new worker; doubled while workers keep failing soon after they start.
constexpr absl::Duration kFirstBackoff = absl::Milliseconds(500);
constexpr absl::Duration kMaxBackoff = absl::Seconds(30);
// A worker that served this long before failing starts the next one after the first backoff.
constexpr absl::Duration kHealthyRun = absl::Seconds(60);
// How long a caller polls for a worker's reply before it sleeps.
constexpr absl::Duration kReplySpin = absl::Microseconds(50);
// How long the completion thread of a GPU's worker polls after a reply before it sleeps: past
// the gap between one request's reply and the next request's (a client's round trip), so that
// a steady stream of requests costs it no wake-ups.
constexpr absl::Duration kCompletionPoll = absl::Microseconds(500);
// With this many runs awaited by the completion thread, a small request's caller waits for its
// own reply instead: one thread finishing every reply would become the bottleneck.
constexpr int kAwaitedAtMost = 4;
// Frees one request carries at most (up to 10 bytes each in a message of at most 192 KiB).
constexpr size_t kFreesPerRequest = 4096;

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  return "stopped";
}

uint64_t Address(const std::byte* p) { return reinterpret_cast<uintptr_t>(p); }

// Half a connection's staging buffer (4 KiB aligned): transfers alternate between the two.
int64_t Half(const RemoteDevice::Connection& c);

// The devices of this process not yet destroyed: one device asks another (an importer to let
// go of an allocation, an exporter to free it after) only while it is here.
std::mutex peers_mu;
std::set<const RemoteDevice*>& Peers() {
  static auto* peers = new std::set<const RemoteDevice*>;
  return *peers;
}
template <typename F>
bool WithPeer(const RemoteDevice* d, F f) {
  std::lock_guard<std::mutex> lock(peers_mu);
  if (Peers().count(d) == 0) return false;
  f();
  return true;
}

}  // namespace

struct RemoteDevice::Worker {
  pid_t pid = 0;
  std::unique_ptr<Channel> control;
  absl::Time started;
  ~Worker() {
    control.reset();  // The worker leaves when its control connection closes...
    if (pid > 0) {
      kill(pid, SIGKILL);  // ...and at once when told.
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
};

struct RemoteDevice::Connection {
  std::unique_ptr<Channel> channel;
  std::byte* staging = nullptr;
  int64_t staging_bytes = 0;
  // Requests sent whose reply is yet to be received (writes and reads in a pipeline: the
  // lane's owner alone), and the half of the staging buffer the next one uses.
  int pending = 0;
  int next_half = 0;
  int64_t generation = 0;
  // One exchange at a time: a call waits while a run's reply is awaited.
  std::mutex mu;
  std::condition_variable idle;
  bool running = false;
  // The run in flight: what its reply leaves in the staging buffer is taken out by
  // `take_out` before the connection serves another exchange; then `done`.
  std::function<void(const absl::Status& io, const pb::Reply& reply)> take_out;
  std::function<void(absl::Status)> done;
  ~Connection() {
    if (staging != nullptr) munmap(staging, static_cast<size_t>(staging_bytes));
  }
};

namespace {

int64_t Half(const RemoteDevice::Connection& c) {
  const int64_t half = c.staging_bytes / 2 / 4096 * 4096;
  return half > 0 ? half : c.staging_bytes;
}

class RemoteLane final : public runtime::Lane {
 public:
  RemoteLane(std::shared_ptr<RemoteDevice::Connection> c, std::function<void()> give_back)
      : connection(std::move(c)), give_back_(std::move(give_back)) {}
  ~RemoteLane() override { give_back_(); }
  // Null where no worker could be reached: every call on the lane then fails.
  std::shared_ptr<RemoteDevice::Connection> connection;

 private:
  std::function<void()> give_back_;
};

// Starts the worker process for `launch` (generation `generation`) and reads its Hello.
absl::StatusOr<std::unique_ptr<RemoteDevice::Worker>> Spawn(const WorkerLaunch& launch,
                                                            int64_t generation,
                                                            pb::Hello* hello) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", strerror(errno)));
  }
  // The worker's end becomes its descriptor 3 (a dup2 onto itself would keep close-on-exec).
  int child_end = sv[1];
  if (child_end == 3) {
    child_end = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
    close(sv[1]);
  }
  std::vector<std::string> args = {"tensorcompute-worker"};
  args.insert(args.end(), launch.server_args.begin(), launch.server_args.end());
  args.push_back("--worker_fd=3");
  args.push_back(absl::StrCat("--worker_device=", launch.index));
  args.push_back(absl::StrCat("--worker_generation=", generation));
  args.push_back(absl::StrCat("--worker_parent=", getpid()));
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, child_end, 3);
  pid_t pid = 0;
  // The server's own binary, even where the file was replaced since it started.
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(child_end);
  auto worker = std::make_unique<RemoteDevice::Worker>();
  worker->control = std::make_unique<Channel>(sv[0]);
  if (rc != 0) return absl::InternalError(absl::StrCat("starting a worker: ", strerror(rc)));
  worker->pid = pid;
  worker->started = absl::Now();
  pollfd p{sv[0], POLLIN, 0};
  if (poll(&p, 1, kStartTimeoutMs) <= 0) {
    return absl::DeadlineExceededError("the worker's device did not come up in time");
  }
  if (absl::Status s = worker->control->Receive(hello); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("the worker stopped while starting: ", s.message()));
  }
  if (!hello->error().empty()) return absl::UnavailableError(hello->error());
  return worker;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RemoteDevice>> RemoteDevice::Start(
    const WorkerLaunch& launch, const runtime::DeviceOptions& options) {
  pb::Hello hello;
  auto worker = Spawn(launch, 0, &hello);
  if (!worker.ok()) return worker.status();
  std::unique_ptr<RemoteDevice> d(
      new RemoteDevice(launch, *std::move(worker), hello.memory_budget(), options));
  d->info_.kind = hello.kind();
  d->info_.name = hello.name();
  d->info_.index = hello.index();
  d->info_.total_memory = hello.total_memory();
  d->info_.multiprocessors = hello.multiprocessors();
  d->info_.streams = hello.streams();
  d->info_.uuid = hello.uuid();
  d->tile_rule_ = static_cast<TileRule>(hello.tile_rule());
  d->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  d->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (d->epoll_fd_ < 0 || d->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("epoll: ", strerror(errno)));
  }
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.fd = d->wake_fd_;
  if (epoll_ctl(d->epoll_fd_, EPOLL_CTL_ADD, d->wake_fd_, &wake) != 0) {
    return absl::InternalError(absl::StrCat("epoll_ctl: ", strerror(errno)));
  }
  d->completer_ = std::thread([p = d.get()] { p->Complete(); });
  d->supervisor_ = std::thread([p = d.get()] { p->Supervise(); });
  {
    std::lock_guard<std::mutex> lock(peers_mu);
    Peers().insert(d.get());
  }
  return d;
}

RemoteDevice::RemoteDevice(const WorkerLaunch& launch, std::unique_ptr<Worker> worker,
                           int64_t budget, const runtime::DeviceOptions& options)
    : Device(runtime::DeviceInfo{}, budget, options),
      launch_(launch),
      staging_bytes_(options.staging_bytes),
      tile_rule_(TileRule::kDense),
      worker_(std::move(worker)) {}

RemoteDevice::~RemoteDevice() {
  {
    std::lock_guard<std::mutex> lock(peers_mu);
    Peers().erase(this);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (supervisor_.joinable()) supervisor_.join();
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  if (completer_.joinable()) completer_.join();
  idle_.clear();
  worker_.reset();
  if (pool_fd_ >= 0) close(pool_fd_);
  for (auto& [key, m] : host_maps_) close(m.fd);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

int RemoteDevice::worker_pid() const {
  std::lock_guard<std::mutex> lock(mu_);
  return worker_ != nullptr ? worker_->pid : 0;
}

absl::StatusOr<std::shared_ptr<RemoteDevice::Connection>> RemoteDevice::Take() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (worker_ == nullptr || failed()) {
    absl::Status h = health();
    return h.ok() ? absl::UnavailableError(absl::StrCat("device ", info_.index,
                                                        " is starting a new worker"))
                  : h;
  }
  if (!idle_.empty()) {
    std::shared_ptr<Connection> c = std::move(idle_.back());
    idle_.pop_back();
    return c;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("socketpair: ", strerror(errno)));
  }
  auto c = std::make_shared<Connection>();
  c->channel = std::make_unique<Channel>(sv[0]);
  c->channel->set_spin(kReplySpin);
  c->generation = generation();
  const int memfd = memfd_create("tensorcompute-staging", MFD_CLOEXEC);
  void* p = MAP_FAILED;
  if (memfd >= 0 && ftruncate(memfd, staging_bytes_) == 0) {
    p = mmap(nullptr, static_cast<size_t>(staging_bytes_), PROT_READ | PROT_WRITE, MAP_SHARED,
             memfd, 0);
  }
  if (p == MAP_FAILED) {
    if (memfd >= 0) close(memfd);
    close(sv[1]);
    return absl::ResourceExhaustedError(
        absl::StrCat("staging buffer for a worker connection: ", strerror(errno)));
  }
  c->staging = static_cast<std::byte*>(p);
  c->staging_bytes = staging_bytes_;
  pb::Request connect;
  connect.mutable_connect();
  absl::Status sent = worker_->control->Send(connect, {sv[1], memfd});
  close(sv[1]);
  close(memfd);
  if (!sent.ok()) return absl::UnavailableError(absl::StrCat("worker: ", sent.message()));
  return c;
}

void RemoteDevice::Give(std::shared_ptr<Connection> c) const {
  if (c == nullptr) return;
  // A write still unanswered: its outcome would have been the next exchange's (a run, a
  // sync); with none, the reply is taken in before another lane gets the connection.
  (void)Settle(*c);
  {
    // One whose run is still in flight is not handed out again (its staging buffer is not
    // free yet): it closes once the reply is in.
    std::lock_guard<std::mutex> running(c->mu);
    if (c->running) return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  // Connections of a worker since replaced close here.
  if (c->generation == generation() && !failed() && !stopping_) idle_.push_back(std::move(c));
}

void RemoteDevice::Lost(int64_t generation, const absl::Status& why) const {
  if (generation != this->generation()) return;  // A worker since replaced.
  const_cast<RemoteDevice*>(this)->MarkFailed(why);
  wake_.notify_all();
}

void RemoteDevice::TakeFrees(const Connection& c, pb::Request& request) const {
  std::lock_guard<std::mutex> lock(frees_mu_);
  if (!unmaps_.empty() && unmaps_generation_ == c.generation) {
    for (uint64_t key : unmaps_) request.add_unmaps(key);
    unmaps_.clear();
  }
  if (frees_.empty() || frees_generation_ != c.generation) return;
  // Some at a time: a message has a size limit, and the rest go with the next request.
  const size_t n = std::min(frees_.size(), kFreesPerRequest);
  for (size_t i = frees_.size() - n; i < frees_.size(); ++i) request.add_frees(frees_[i]);
  frees_.resize(frees_.size() - n);
}

absl::Status RemoteDevice::Settle(Connection& c) const {
  absl::Status first;
  while (c.pending > 0) {
    absl::Status s = ReceiveOne(c);
    if (first.ok()) first = s;
  }
  return first;
}

absl::Status RemoteDevice::ReceiveOne(Connection& c) const {
  pb::Reply reply;
  absl::Status io;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    io = c.channel->Receive(&reply);
  }
  --c.pending;
  // The connection is lost with the worker: nothing more comes on it.
  if (!io.ok()) c.pending = 0;
  return Outcome(c, io, reply);
}

absl::Status RemoteDevice::Post(Connection& c, pb::Request& request) const {
  TakeFrees(c, request);
  absl::Status s;
  {
    std::unique_lock<std::mutex> lock(c.mu);
    c.idle.wait(lock, [&c] { return !c.running; });
    s = c.channel->Send(request);
  }
  if (s.ok()) {
    ++c.pending;
    return s;
  }
  if (s.code() != absl::StatusCode::kUnavailable) return s;
  return Outcome(c, s, pb::Reply());
}

absl::Status RemoteDevice::Call(Connection& c, pb::Request& request, pb::Reply* reply,
                                const std::vector<int>& send_fds,
                                std::vector<int>* reply_fds) const {
  if (absl::Status s = Settle(c); !s.ok()) return s;
  TakeFrees(c, request);
  absl::Status s;
  {
    std::unique_lock<std::mutex> lock(c.mu);
    c.idle.wait(lock, [&c] { return !c.running; });
    s = c.channel->Send(request, send_fds);
    // A message that could not be sent at all (too large) leaves the connection as it was.
    if (!s.ok() && s.code() != absl::StatusCode::kUnavailable) return s;
    if (s.ok()) s = c.channel->Receive(reply, reply_fds);
  }
  return Outcome(c, s, *reply);
}

absl::Status RemoteDevice::Outcome(const Connection& c, const absl::Status& io,
                                   const pb::Reply& reply_message) const {
  const pb::Reply* reply = &reply_message;
  const absl::Status& s = io;
  if (!s.ok()) {
    Lost(c.generation, absl::UnavailableError(absl::StrCat("its worker process stopped (",
                                                           s.message(), ")")));
    const absl::Status h = health();
    return h.ok() ? absl::UnavailableError(absl::StrCat("device ", info_.index,
                                                        ": its worker process stopped"))
                  : h;
  }
  absl::Status result(static_cast<absl::StatusCode>(reply->code()), reply->message());
  if (reply->device_failed()) {
    Lost(c.generation, result.ok() ? absl::InternalError("the device failed") : result);
  }
  return result;
}

std::unique_ptr<runtime::Lane> RemoteDevice::AcquireLane() {
  auto c = Take();
  std::shared_ptr<Connection> connection = c.ok() ? *std::move(c) : nullptr;
  return std::make_unique<RemoteLane>(connection, [this, connection] { Give(connection); });
}

namespace {
absl::StatusOr<RemoteDevice::Connection*> LaneConnection(runtime::Lane& lane,
                                                         const runtime::Device& d) {
  auto* c = static_cast<RemoteLane&>(lane).connection.get();
  if (c == nullptr) {
    absl::Status h = d.health();
    if (h.ok()) h = absl::UnavailableError(absl::StrCat("device ", d.info().index,
                                                        " is starting a new worker"));
    return h;
  }
  return c;
}
}  // namespace

absl::StatusOr<std::byte*> RemoteDevice::RawAllocate(int64_t bytes, bool zero,
                                                     runtime::Lane* lane, void** tag) {
  std::shared_ptr<Connection> own;
  Connection* c = nullptr;
  if (lane != nullptr) {
    auto lc = LaneConnection(*lane, *this);
    if (!lc.ok()) return lc.status();
    c = *lc;
  } else {
    auto taken = Take();
    if (!taken.ok()) return taken.status();
    own = *std::move(taken);
    c = own.get();
  }
  pb::Request request;
  request.mutable_allocate()->set_bytes(bytes);
  request.mutable_allocate()->set_zero(zero);
  pb::Reply reply;
  absl::Status s = Call(*c, request, &reply);
  // The tag is the generation the bytes belong to: a worker since replaced took them along.
  // Read before the connection goes back: Give() drops one of a replaced worker.
  const int64_t g = c->generation;
  Give(std::move(own));
  if (!s.ok()) return s;
  *tag = reinterpret_cast<void*>(static_cast<uintptr_t>(g));
  return reinterpret_cast<std::byte*>(static_cast<uintptr_t>(reply.data()));
}

void RemoteDevice::RawFree(std::byte* p, int64_t /*bytes*/, void* tag) {
  const auto g = static_cast<int64_t>(reinterpret_cast<uintptr_t>(tag));
  if (g != generation()) return;  // Gone with the worker it belonged to.
  const uint64_t address = Address(p);
  Importers importers;
  std::string shared;
  {
    std::lock_guard<std::mutex> lock(share_mu_);
    if (pool_generation_ == g) {
      auto it = exported_.find(address);
      if (it != exported_.end()) {
        importers = std::move(it->second.importers);
        shared = std::move(it->second.shared);
        exported_.erase(it);
      }
    }
  }
  if (importers.empty()) {
    QueueFree(address, g);
    return;
  }
  // Other workers keep it mapped: freed once each of them let go of it.
  auto left = std::make_shared<std::atomic<size_t>>(importers.size());
  const std::function<void()> then = [this, left, address, g] {
    if (left->fetch_sub(1) != 1) return;
    WithPeer(this, [&] { QueueFree(address, g); });
  };
  const std::string key = PoolKey(g);
  for (const auto& importer : importers) {
    const RemoteDevice* d = importer.first;
    PendingUnshare u{importer.second, key, shared, false, then};
    if (!WithPeer(d, [&] { d->QueueUnshare(std::move(u)); })) then();
  }
}

void RemoteDevice::QueueFree(uint64_t address, int64_t g) {
  std::lock_guard<std::mutex> lock(frees_mu_);
  if (frees_generation_ != g) {
    if (g < frees_generation_) return;  // A worker since replaced took it along.
    frees_.clear();
    frees_generation_ = g;
  }
  frees_.push_back(address);
}

void RemoteDevice::QueueUnshare(PendingUnshare u) const {
  {
    std::lock_guard<std::mutex> lock(unshare_mu_);
    unshares_.push_back(std::move(u));
  }
  wake_.notify_all();
}

void RemoteDevice::SendUnshares() {
  std::vector<PendingUnshare> batch;
  {
    std::lock_guard<std::mutex> lock(unshare_mu_);
    if (unshares_.empty()) return;
    batch.swap(unshares_);
  }
  const auto run = [](std::vector<std::function<void()>>& thens) {
    for (auto& t : thens) {
      if (t) t();
    }
  };
  // By pool and kind; at most this many allocations a message (up to 70 bytes each).
  constexpr size_t kPerRequest = 1024;
  std::map<std::pair<std::string, bool>, std::vector<PendingUnshare*>> groups;
  std::vector<std::function<void()>> now;
  const int64_t g = generation();
  for (PendingUnshare& u : batch) {
    // A worker since replaced had its mappings end with it.
    if (u.generation != g || failed()) {
      now.push_back(std::move(u.then));
    } else {
      groups[{u.pool_key, u.pool}].push_back(&u);
    }
  }
  run(now);
  for (auto& [what, us] : groups) {
    for (size_t i = 0; i < us.size(); i += kPerRequest) {
      std::vector<std::function<void()>> thens;
      pb::Request request;
      auto* unshare = request.mutable_unshare();
      unshare->set_pool_key(what.first);
      unshare->set_pool(what.second);
      for (size_t j = i; j < std::min(us.size(), i + kPerRequest); ++j) {
        if (!what.second) unshare->add_shared(us[j]->shared);
        thens.push_back(std::move(us[j]->then));
      }
      auto c = Take();
      if (!c.ok()) {  // No worker to ask: its mappings are gone, or go with it.
        run(thens);
        continue;
      }
      std::shared_ptr<Connection> connection = *std::move(c);
      Send(connection, request, nullptr, 0, 0,
           [this, connection, thens = std::move(thens), run](absl::Status) mutable {
             Give(connection);
             run(thens);
           });
    }
  }
}

void RemoteDevice::ForgetExports(int64_t g) {
  Importers importers;
  {
    std::lock_guard<std::mutex> lock(share_mu_);
    if (pool_generation_ != g) return;
    importers.swap(pool_importers_);
    exported_.clear();
    if (pool_fd_ >= 0) close(pool_fd_);
    pool_fd_ = -1;
    pool_generation_ = -1;
  }
  const std::string key = PoolKey(g);
  for (const auto& importer : importers) {
    const RemoteDevice* d = importer.first;
    PendingUnshare u{importer.second, key, "", true, nullptr};
    WithPeer(d, [&] { d->QueueUnshare(std::move(u)); });
  }
}

void RemoteDevice::FlushFrees() {
  {
    std::lock_guard<std::mutex> lock(frees_mu_);
    if (frees_.empty() && unmaps_.empty()) return;
  }
  if (flushing_.exchange(true)) return;  // The last one is still on its way.
  auto c = Take();
  if (!c.ok()) {
    flushing_ = false;
    return;
  }
  pb::Request request;  // No body: the frees alone.
  // Answered through the completion thread: a worker that does not answer never holds up the
  // supervisor.
  std::shared_ptr<Connection> connection = *std::move(c);
  Send(connection, request, nullptr, 0, 0, [this, connection](absl::Status) {
    Give(connection);
    flushing_ = false;
  });
}

absl::Status RemoteDevice::Write(runtime::Lane& lane, runtime::Storage& dst, int64_t offset,
                                 const void* src, int64_t n) {
  if (offset < 0 || n < 0 || offset > dst.bytes() - n) {
    return absl::OutOfRangeError("write past the end of the storage");
  }
  auto c = LaneConnection(lane, *this);
  if (!c.ok()) return c.status();
  Connection& cn = **c;
  const auto* from = static_cast<const std::byte*>(src);
  // Through the two halves of the staging buffer in turn: one is filled while the worker
  // copies the other to the device. Each write's outcome is the next exchange's on the lane.
  const int64_t half = Half(cn);
  for (int64_t done = 0; done < n;) {
    const int64_t m = std::min(n - done, half);
    const int64_t at = cn.next_half * half;
    std::memcpy(cn.staging + at, from + done, static_cast<size_t>(m));
    if (absl::Status s = Settle(cn); !s.ok()) return s;
    pb::Request request;
    auto* w = request.mutable_write();
    w->set_data(Address(dst.data()));
    w->set_offset(offset + done);
    w->set_bytes(m);
    w->set_staging_at(at);
    if (absl::Status s = Post(cn, request); !s.ok()) return s;
    cn.next_half ^= 1;
    done += m;
  }
  return absl::OkStatus();
}

absl::Status RemoteDevice::Read(runtime::Lane& lane, const runtime::Storage& src, int64_t offset,
                                void* dst, int64_t n) {
  if (offset < 0 || n < 0 || offset > src.bytes() - n) {
    return absl::OutOfRangeError("read past the end of the storage");
  }
  auto c = LaneConnection(lane, *this);
  if (!c.ok()) return c.status();
  return ReadVia(**c, src.data() + offset, n, static_cast<std::byte*>(dst));
}

absl::Status RemoteDevice::ReadVia(Connection& c, const std::byte* src, int64_t n,
                                   std::byte* dst) const {
  if (absl::Status s = Settle(c); !s.ok()) return s;
  // Two reads in flight, each into its half of the staging buffer: one half is copied out
  // here while the worker fills the other.
  const int64_t half = Half(c);
  const int64_t chunks = (n + half - 1) / half;
  const auto post = [&](int64_t k) {
    pb::Request request;
    auto* r = request.mutable_read();
    r->set_data(Address(src));
    r->set_offset(k * half);
    r->set_bytes(std::min(half, n - k * half));
    r->set_staging_at((k % 2) * half);
    return Post(c, request);
  };
  absl::Status s;
  for (int64_t k = 0; k < std::min<int64_t>(chunks, 2) && s.ok(); ++k) s = post(k);
  for (int64_t k = 0; k < chunks && s.ok(); ++k) {
    s = ReceiveOne(c);
    if (!s.ok()) break;
    std::memcpy(dst + k * half, c.staging + (k % 2) * half,
                static_cast<size_t>(std::min(half, n - k * half)));
    if (k + 2 < chunks) s = post(k + 2);
  }
  if (!s.ok()) (void)Settle(c);
  return s;
}

absl::Status RemoteDevice::ReadAddress(const std::byte* src, int64_t n, std::byte* dst) const {
  auto c = Take();
  if (!c.ok()) return c.status();
  absl::Status s = ReadVia(**c, src, n, dst);
  Give(*std::move(c));
  return s;
}

absl::Status RemoteDevice::CopyFromDevice(runtime::Lane& lane, runtime::Storage& dst,
                                          int64_t offset, const runtime::Device& from,
                                          const std::byte* src, int64_t n) {
  if (offset < 0 || n < 0 || offset > dst.bytes() - n) {
    return absl::OutOfRangeError("copy past the end of the storage");
  }
  auto c = LaneConnection(lane, *this);
  if (!c.ok()) return c.status();
  if (&from == this) {
    pb::Request request;
    auto* copy = request.mutable_copy();
    copy->set_data(Address(dst.data()));
    copy->set_offset(offset);
    copy->set_src(Address(src));
    copy->set_bytes(n);
    pb::Reply reply;
    return Call(**c, request, &reply);
  }
  const auto* other = dynamic_cast<const RemoteDevice*>(&from);
  if (other == nullptr) return Device::CopyFromDevice(lane, dst, offset, from, src, n);
  bool try_sharing = n > 0;
  {
    std::lock_guard<std::mutex> lock(share_mu_);
    try_sharing = try_sharing &&
                  std::find(unshared_.begin(), unshared_.end(), other) == unshared_.end();
  }
  if (try_sharing) {
    absl::Status s = CopyShared(lane, dst, offset, *other, src, n);
    if (s.code() != absl::StatusCode::kFailedPrecondition &&
        s.code() != absl::StatusCode::kUnimplemented) {
      return s;
    }
    {
      std::lock_guard<std::mutex> lock(share_mu_);
      unshared_.push_back(other);
    }
    Log(absl::StrCat("device ", info_.index, " copies from device ", other->info().index,
                     " through the host: ", s.message()));
  }
  // Between workers: through the host, a staging buffer's worth at a time.
  std::vector<std::byte> buffer(static_cast<size_t>(std::min(n, staging_bytes_)));
  for (int64_t done = 0; done < n;) {
    const int64_t m = std::min(n - done, static_cast<int64_t>(buffer.size()));
    if (absl::Status s = other->ReadAddress(src + done, m, buffer.data()); !s.ok()) return s;
    if (absl::Status s = Write(lane, dst, offset + done, buffer.data(), m); !s.ok()) return s;
    done += m;
  }
  return absl::OkStatus();
}

std::string RemoteDevice::PoolKey(int64_t g) const {
  return absl::StrCat("device ", info_.index, " worker ", g);
}

absl::StatusOr<int> RemoteDevice::SharedPool(Connection& c, std::string* key) const {
  *key = PoolKey(c.generation);
  const auto copy = [this]() -> absl::StatusOr<int> {
    const int fd = fcntl(pool_fd_, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return absl::ResourceExhaustedError(absl::StrCat("dup: ", strerror(errno)));
    return fd;
  };
  {
    std::lock_guard<std::mutex> lock(share_mu_);
    if (pool_fd_ >= 0 && pool_generation_ == c.generation) return copy();
  }
  // Asked without the lock held: a free (which takes it) never waits for a worker.
  pb::Request request;
  auto* share = request.mutable_share();
  share->set_pool(true);  // The pool alone.
  pb::Reply reply;
  std::vector<int> fds;
  absl::Status s = Call(c, request, &reply, {}, &fds);
  if (!s.ok()) {
    for (int fd : fds) close(fd);
    return s;
  }
  if (fds.size() != 1) {
    for (int fd : fds) close(fd);
    return absl::FailedPreconditionError("the worker sent no memory pool");
  }
  std::lock_guard<std::mutex> lock(share_mu_);
  if (pool_generation_ == c.generation && pool_fd_ >= 0) {
    close(fds[0]);  // Another caller got it first.
  } else if (c.generation >= pool_generation_) {
    if (pool_fd_ >= 0) close(pool_fd_);
    pool_fd_ = fds[0];
    pool_generation_ = c.generation;
    exported_.clear();  // Of a worker since replaced.
    pool_importers_.clear();
  } else {
    // Of a worker since replaced: handed out this once.
    return fds[0];
  }
  return copy();
}

absl::StatusOr<RemoteDevice::SharedRange> RemoteDevice::ShareWith(
    const std::byte* src, int64_t n, const RemoteDevice* importer,
    int64_t importer_generation) const {
  const uint64_t at = Address(src);
  const auto record = [&](Importers& to) {
    const auto who = std::make_pair(importer, importer_generation);
    if (std::find(to.begin(), to.end(), who) == to.end()) to.push_back(who);
  };
  {
    std::lock_guard<std::mutex> lock(share_mu_);
    auto it = exported_.upper_bound(at);
    if (pool_fd_ >= 0 && pool_generation_ == generation() && it != exported_.begin()) {
      --it;
      const uint64_t into = at - it->first;
      if (into <= static_cast<uint64_t>(it->second.bytes) &&
          n <= it->second.bytes - static_cast<int64_t>(into)) {
        const int fd = fcntl(pool_fd_, F_DUPFD_CLOEXEC, 0);
        if (fd < 0) return absl::ResourceExhaustedError(absl::StrCat("dup: ", strerror(errno)));
        record(it->second.importers);
        record(pool_importers_);
        return SharedRange{PoolKey(pool_generation_), it->second.shared,
                           static_cast<int64_t>(into), fd};
      }
    }
  }
  // Not shared yet: asked of the worker that holds the bytes.
  auto theirs = Take();
  if (!theirs.ok()) return theirs.status();
  SharedRange range;
  pb::Request share;
  share.mutable_share()->set_data(at);
  share.mutable_share()->set_bytes(n);
  pb::Reply shared;
  absl::StatusOr<int> pool = SharedPool(**theirs, &range.pool_key);
  absl::Status s = pool.ok() ? Call(**theirs, share, &shared) : pool.status();
  const int64_t g = (*theirs)->generation;
  Give(*std::move(theirs));
  if (s.ok() && (shared.data() > at || shared.bytes() < n ||
                 static_cast<int64_t>(shared.data()) > shared.bytes() - n)) {
    s = absl::InternalError("the worker shared an allocation that does not hold the bytes");
  }
  if (!s.ok()) {
    if (pool.ok()) close(*pool);
    return s;
  }
  range.pool_fd = *pool;
  range.shared = shared.shared();
  range.offset = static_cast<int64_t>(shared.data());
  std::lock_guard<std::mutex> lock(share_mu_);
  if (pool_generation_ == g) {
    Exported& e = exported_[at - shared.data()];
    e.bytes = shared.bytes();
    e.shared = shared.shared();
    record(e.importers);
    record(pool_importers_);
  }
  return range;
}

absl::Status RemoteDevice::CopyShared(runtime::Lane& lane, runtime::Storage& dst, int64_t offset,
                                      const RemoteDevice& from, const std::byte* src,
                                      int64_t n) {
  auto c = LaneConnection(lane, *this);
  if (!c.ok()) return c.status();
  // The exporter's storage stays allocated until this returns: the caller holds it.
  auto range = from.ShareWith(src, n, this, (*c)->generation);
  if (!range.ok()) return range.status();
  pb::Request request;
  auto* copy = request.mutable_copy_shared();
  copy->set_data(Address(dst.data()));
  copy->set_offset(offset);
  copy->set_pool_key(range->pool_key);
  copy->set_shared(range->shared);
  copy->set_src_offset(range->offset);
  copy->set_bytes(n);
  pb::Reply reply;
  absl::Status s = Call(**c, request, &reply, {range->pool_fd});
  close(range->pool_fd);
  return s;
}

absl::Status RemoteDevice::Sync(runtime::Lane& lane) {
  auto c = LaneConnection(lane, *this);
  if (!c.ok()) return c.status();
  pb::Request request;
  request.mutable_sync();
  pb::Reply reply;
  return Call(**c, request, &reply);
}

void RemoteDevice::Run(runtime::Lane& lane, const PreparedOp& op, std::vector<TensorView> inputs,
                       std::byte* out, std::function<void(absl::Status)> done,
                       runtime::ReadBack read_back) {
  if (failed()) {
    done(health());
    return;
  }
  auto c = LaneConnection(lane, *this);
  if (!c.ok()) {
    done(c.status());
    return;
  }
  // Pinned memory of a caller's that the worker maps too: the read-back goes there.
  absl::StatusOr<std::pair<uint64_t, int64_t>> into;
  if (read_back.pinned && read_back.bytes > 0) {
    into = FindHost(read_back.host, read_back.bytes);
    if (into.ok()) {
      if (absl::Status s = MapHost(**c, into->first); !s.ok()) into = s;
    }
  } else {
    into = absl::NotFoundError("");
  }
  if (!into.ok() && (read_back.bytes < 0 || read_back.bytes > (*c)->staging_bytes)) {
    done(absl::InternalError("read-back larger than the staging buffer"));
    return;
  }
  pb::Request request;
  Describe(op, inputs, &request);
  auto* run = request.mutable_run();
  run->set_out(Address(out));
  run->set_read_back(read_back.bytes);
  if (into.ok()) {
    run->mutable_read_back_host()->set_key(into->first);
    run->mutable_read_back_host()->set_at(into->second);
    Send(static_cast<RemoteLane&>(lane).connection, request, nullptr, 0, 0, std::move(done));
    return;
  }
  Send(static_cast<RemoteLane&>(lane).connection, request,
       static_cast<std::byte*>(read_back.host), 0, read_back.bytes, std::move(done));
}

std::shared_ptr<void> RemoteDevice::MapShared(void* p, int64_t n, bool read_only, int fd) {
  if (fd < 0 || n <= 0) return nullptr;
  const int mine = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (mine < 0) return nullptr;
  const uint64_t key = Address(static_cast<std::byte*>(p));
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(host_mu_);
    if (host_maps_.count(key) != 0) {
      close(mine);
      return nullptr;
    }
    id = ++host_ids_;
    host_maps_[key] = HostMap{n, read_only, mine, -1, id};
  }
  // Mapped by the worker now (pinning takes milliseconds: not in a request's way later).
  absl::Status s;
  if (auto c = Take(); c.ok()) {
    s = MapHost(**c, id);
    Give(*std::move(c));
  } else {
    s = c.status();
  }
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(host_mu_);
    close(host_maps_[key].fd);
    host_maps_.erase(key);
    return nullptr;
  }
  return std::shared_ptr<void>(p, [this, key](void*) {
    WithPeer(this, [&] { const_cast<RemoteDevice*>(this)->UnmapHost(key); });
  });
}

void RemoteDevice::UnmapHost(uint64_t key) {
  int64_t g = -1;
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(host_mu_);
    auto it = host_maps_.find(key);
    if (it == host_maps_.end()) return;
    close(it->second.fd);
    g = it->second.generation;
    id = it->second.id;
    host_maps_.erase(it);
  }
  if (g != generation()) return;  // Gone with the worker that mapped it.
  std::lock_guard<std::mutex> lock(frees_mu_);
  if (unmaps_generation_ != g) {
    unmaps_.clear();
    unmaps_generation_ = g;
  }
  unmaps_.push_back(id);
}

absl::StatusOr<std::pair<uint64_t, int64_t>> RemoteDevice::FindHost(const void* p,
                                                                     int64_t n) const {
  const uint64_t at = Address(static_cast<const std::byte*>(p));
  std::lock_guard<std::mutex> lock(host_mu_);
  auto it = host_maps_.upper_bound(at);
  if (it != host_maps_.begin() && n >= 0) {
    --it;
    const uint64_t into = at - it->first;
    if (into <= static_cast<uint64_t>(it->second.bytes) &&
        static_cast<uint64_t>(n) <= static_cast<uint64_t>(it->second.bytes) - into) {
      return std::make_pair(it->second.id, static_cast<int64_t>(into));
    }
  }
  return absl::NotFoundError("not in shared memory this device maps");
}

bool RemoteDevice::Reaches(const void* host, int64_t n) const { return FindHost(host, n).ok(); }

absl::Status RemoteDevice::MapHost(Connection& c, uint64_t id) const {
  pb::Request request;
  int fd = -1;
  const auto find = [this, id] {
    return std::find_if(host_maps_.begin(), host_maps_.end(),
                        [id](const auto& e) { return e.second.id == id; });
  };
  {
    std::lock_guard<std::mutex> lock(host_mu_);
    auto it = find();
    if (it == host_maps_.end()) return absl::NotFoundError("shared memory no longer mapped");
    if (it->second.generation == c.generation) return absl::OkStatus();
    fd = fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
    auto* m = request.mutable_map_host();
    m->set_key(id);
    m->set_bytes(it->second.bytes);
    m->set_read_only(it->second.read_only);
  }
  if (fd < 0) return absl::ResourceExhaustedError(absl::StrCat("dup: ", strerror(errno)));
  pb::Reply reply;
  absl::Status s = Call(c, request, &reply, {fd});
  close(fd);
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(host_mu_);
  auto it = find();
  if (it != host_maps_.end()) it->second.generation = c.generation;
  return absl::OkStatus();
}

absl::Status RemoteDevice::WritePinned(runtime::Lane& lane, runtime::Storage& dst, int64_t offset,
                                       const void* src, int64_t n) {
  if (offset < 0 || n < 0 || offset > dst.bytes() - n) {
    return absl::OutOfRangeError("write past the end of the storage");
  }
  auto c = LaneConnection(lane, *this);
  if (!c.ok()) return c.status();
  auto from = FindHost(src, n);
  if (!from.ok() || !MapHost(**c, from->first).ok()) return Write(lane, dst, offset, src, n);
  // Straight from the worker's own mapping; the outcome is the next exchange's on the lane.
  if (absl::Status s = Settle(**c); !s.ok()) return s;
  pb::Request request;
  auto* w = request.mutable_write();
  w->set_data(Address(dst.data()));
  w->set_offset(offset);
  w->set_bytes(n);
  w->mutable_host()->set_key(from->first);
  w->mutable_host()->set_at(from->second);
  return Post(**c, request);
}

void RemoteDevice::Send(std::shared_ptr<Connection> connection, pb::Request& request,
                        std::byte* host, int64_t staging_at, int64_t bytes,
                        std::function<void(absl::Status)> done) {
  // The reply comes to Complete(): the caller's thread goes on at once, as with a device of
  // this process.
  Connection& cn = *connection;
  if (absl::Status s = Settle(cn); !s.ok()) {
    done(s);
    return;
  }
  {
    std::unique_lock<std::mutex> lock(cn.mu);
    cn.idle.wait(lock, [&cn] { return !cn.running; });
    TakeFrees(cn, request);
    if (absl::Status sent = cn.channel->Send(request); !sent.ok()) {
      lock.unlock();
      done(sent.code() == absl::StatusCode::kUnavailable ? Outcome(cn, sent, pb::Reply())
                                                         : sent);
      return;
    }
    cn.running = true;
    cn.take_out = [&cn, host, staging_at, bytes](const absl::Status& io,
                                                  const pb::Reply& reply) {
      if (io.ok() && reply.code() == 0 && bytes > 0) {
        std::memcpy(host, cn.staging + staging_at, static_cast<size_t>(bytes));
      }
    };
    cn.done = std::move(done);
  }
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  const int fd = cn.channel->fd();
  absl::Status watching;
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    if (completer_stopped_) {
      watching = absl::UnavailableError("the server is stopping");
    } else {
      watched_[fd] = connection;
      epoll_event e{};
      e.events = EPOLLIN | EPOLLONESHOT;
      e.data.fd = fd;
      // Level-triggered: a reply already there is reported at once.
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e) != 0 &&
          !(errno == EEXIST && epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &e) == 0)) {
        watching = absl::InternalError(absl::StrCat("epoll_ctl: ", strerror(errno)));
        watched_.erase(fd);
      }
    }
  }
  if (watching.ok()) return;
  // Nobody will receive the reply: the run ends here, and the connection is not used again.
  std::function<void(absl::Status)> finish;
  {
    std::lock_guard<std::mutex> lock(cn.mu);
    finish = std::move(cn.done);
    cn.take_out = nullptr;
    cn.generation = -1;  // Give() drops it.
    cn.running = false;
  }
  cn.idle.notify_all();
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  finish(watching);
}

void RemoteDevice::Complete() {
  epoll_event events[64];
  absl::Time poll_until = absl::InfinitePast();
  while (true) {
    // While replies came lately, look for the next without sleeping: a small run's reply is
    // microseconds away, and a wake-up costs tens of them.
    const bool poll = absl::Now() < poll_until;
    const int n = epoll_wait(epoll_fd_, events, 64, poll ? 0 : -1);
    if (n < 0 && errno != EINTR) {
      Log(absl::StrCat("device ", info_.index, ": epoll_wait: ", strerror(errno)));
      absl::SleepFor(absl::Milliseconds(1));
      continue;
    }
    if (n > 0 && info_.kind != "cpu") poll_until = absl::Now() + kCompletionPoll;
    if (n == 0 && poll) sched_yield();
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        // Stopping: the runs still awaited end here.
        std::map<int, std::shared_ptr<Connection>> left;
        {
          std::lock_guard<std::mutex> lock(watch_mu_);
          completer_stopped_ = true;
          left.swap(watched_);
        }
        for (auto& [f, c] : left) {
          std::function<void(absl::Status)> done;
          {
            std::lock_guard<std::mutex> lock(c->mu);
            done = std::move(c->done);
            c->take_out = nullptr;
            c->running = false;
          }
          c->idle.notify_all();
          in_flight_.fetch_sub(1, std::memory_order_relaxed);
          if (done) done(absl::UnavailableError("the server is stopping"));
        }
        return;
      }
      std::shared_ptr<Connection> c;
      {
        std::lock_guard<std::mutex> lock(watch_mu_);
        auto it = watched_.find(fd);
        if (it == watched_.end()) continue;
        c = std::move(it->second);
        watched_.erase(it);
      }
      pb::Reply reply;
      const absl::Status io = c->channel->Receive(&reply);
      std::function<void(absl::Status)> done;
      {
        std::lock_guard<std::mutex> lock(c->mu);
        c->take_out(io, reply);
        done = std::move(c->done);
        c->take_out = nullptr;
        c->running = false;
      }
      c->idle.notify_all();
      in_flight_.fetch_sub(1, std::memory_order_relaxed);
      // Outside the connection's lock: a failure marks the device failed, whose listeners
      // are called with no lock held.
      done(Outcome(*c, io, reply));
    }
  }
}

void RemoteDevice::Describe(const PreparedOp& op, const std::vector<TensorView>& inputs,
                            pb::Request* request) {
  auto* run = request->mutable_run();
  if (op.expression != nullptr) {
    run->set_expression(op.expression->source);
    for (const std::string& name : op.expression->input_names) run->add_input_names(name);
  } else {
    run->set_op(op.op->spec.name);
    for (const auto& [name, value] : op.attrs.values()) {
      pb::Attr a;
      if (const auto* f = std::get_if<double>(&value)) {
        a.set_f(*f);
      } else if (const auto* i = std::get_if<int64_t>(&value)) {
        a.set_i(*i);
      } else if (const auto* b = std::get_if<bool>(&value)) {
        a.set_b(*b);
      } else if (const auto* t = std::get_if<DType>(&value)) {
        a.set_dtype(static_cast<int>(*t));
      } else if (const auto* str = std::get_if<std::string>(&value)) {
        a.set_s(*str);
      } else {
        continue;  // Absent: left out.
      }
      (*run->mutable_attrs())[name] = std::move(a);
    }
  }
  run->set_out_dtype(static_cast<int>(op.plan.out_dtype));
  for (int64_t s : op.plan.out_strides) run->add_out_strides(s);
  for (const TensorView& v : inputs) {
    pb::View* w = run->add_inputs();
    w->set_dtype(static_cast<int>(v.dtype));
    for (int64_t d : v.shape) w->add_shape(d);
    for (int64_t s : v.strides) w->add_strides(s);
    w->set_offset(v.offset);
    w->set_data(Address(v.data));
    w->set_storage_bytes(v.storage_bytes);
  }
}

namespace {
constexpr int64_t kSmallAlign = 256;
int64_t AlignUp(int64_t n) { return (n + kSmallAlign - 1) / kSmallAlign * kSmallAlign; }
}  // namespace

bool RemoteDevice::TryRunSmall(runtime::Lane& lane, const PreparedOp& op,
                               const std::vector<TensorView>& host_inputs, std::byte* host_out,
                               std::function<void(absl::Status)>& done) {
  auto c = LaneConnection(lane, *this);
  if (!c.ok() || failed()) return false;
  // The staging buffer is free once the writes before have been answered.
  if (absl::Status s = Settle(**c); !s.ok()) {
    done(s);
    return true;
  }
  std::vector<int64_t> at;
  int64_t total = 0;
  for (const TensorView& v : host_inputs) {
    at.push_back(total);
    total += AlignUp(v.storage_bytes);
  }
  const int64_t out_at = total;
  total += op.plan.out_storage_bytes;
  if (total > (*c)->staging_bytes) return false;
  pb::Request request;
  Describe(op, host_inputs, &request);
  auto* run = request.mutable_run();
  for (size_t i = 0; i < host_inputs.size(); ++i) {
    std::memcpy((*c)->staging + at[i], host_inputs[i].data,
                static_cast<size_t>(host_inputs[i].storage_bytes));
    run->mutable_inputs(static_cast<int>(i))->set_data(static_cast<uint64_t>(at[i]));
  }
  run->set_out(static_cast<uint64_t>(out_at));
  run->set_small(true);
  if (in_flight_.load(std::memory_order_relaxed) < kAwaitedAtMost) {
    Send(static_cast<RemoteLane&>(lane).connection, request, host_out, out_at,
         op.plan.out_storage_bytes, std::move(done));
    return true;
  }
  // Many runs awaited already: the completion thread would finish them one after another.
  // The caller waits for this one itself, as many callers can in parallel.
  pb::Reply reply;
  absl::Status s = Call(**c, request, &reply);
  if (s.ok()) {
    std::memcpy(host_out, (*c)->staging + out_at, static_cast<size_t>(op.plan.out_storage_bytes));
  }
  done(s);
  return true;
}

void RemoteDevice::Supervise() {
  absl::Duration backoff = kFirstBackoff;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::milliseconds(100));
    if (stopping_) break;
    lock.unlock();
    SendUnshares();
    lock.lock();
    if (stopping_) break;
    if (!failed()) {
      // A worker that stops while nothing is asked of it: its control connection closes.
      if (worker_ == nullptr) continue;
      lock.unlock();
      FlushFrees();
      lock.lock();
      if (stopping_ || worker_ == nullptr || failed()) continue;
      pollfd p{worker_->control->fd(), POLLIN, 0};
      if (poll(&p, 1, 0) > 0) {
        const int pid = worker_->pid;
        const int64_t g = generation();
        lock.unlock();
        Lost(g, absl::UnavailableError(
                    absl::StrCat("its worker process (pid ", pid, ") stopped")));
        lock.lock();
      }
      continue;
    }
    // Failed: replace the worker, after the backoff.
    std::unique_ptr<Worker> old = std::move(worker_);
    idle_.clear();
    lock.unlock();
    if (old != nullptr) {
      const int pid = old->pid;
      if (absl::Now() - old->started >= kHealthyRun) backoff = kFirstBackoff;
      int status = 0;
      kill(pid, SIGKILL);
      const bool reaped = waitpid(pid, &status, 0) == pid;
      old->pid = 0;
      old.reset();
      // What other workers mapped of it goes too (they are told to let go of its pool).
      ForgetExports(generation());
      Log(absl::StrCat("device ", info_.index, ": worker pid ", pid, " ",
                       reaped ? DescribeExit(status) : "gone", "; a new one starts in ",
                       absl::FormatDuration(backoff)));
    }
    lock.lock();
    wake_.wait_for(lock, absl::ToChronoMilliseconds(backoff), [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    pb::Hello hello;
    auto fresh = Spawn(launch_, generation() + 1, &hello);
    lock.lock();
    backoff = std::min(backoff * 2, kMaxBackoff);
    if (!fresh.ok()) {
      Log(absl::StrCat("device ", info_.index, ": a new worker did not start: ",
                       fresh.status().ToString()));
      continue;
    }
    if (stopping_) break;
    worker_ = *std::move(fresh);
    // A new generation: connections and storage of the one before are gone with it.
    MarkRecovered();
    Log(absl::StrCat("device ", info_.index, " serves again (worker pid ", worker_->pid,
                     ", restart ", generation(), ")"));
  }
}

}  // namespace tc::server::worker
