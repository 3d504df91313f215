// RemoteDevice (remote_device.h): its worker process started, supervised and replaced.
#include "server/worker/remote_device_internal.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "server/env/log.h"

extern char** environ;

namespace tc::server::worker {

namespace {

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  return "stopped";
}

// Starts the worker process for `launch` (generation `generation`) and reads its Hello.
absl::StatusOr<std::unique_ptr<RemoteDevice::Worker>> Spawn(const WorkerLaunch& launch,
                                                            int64_t generation, pb::Hello* hello) {
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
      worker_(std::move(worker)) {
  Offer(this, /*ipc=*/nullptr, this);
}

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
        Lost(g, absl::UnavailableError(absl::StrCat("its worker process (pid ", pid, ") stopped")));
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
      Log(absl::StrCat("device ", info_.index,
                       ": a new worker did not start: ", fresh.status().ToString()));
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
