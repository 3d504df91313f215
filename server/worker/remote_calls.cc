// RemoteDevice (remote_device.h): the lane pool, connections to the current worker, and one
// request and its reply.
#include "server/worker/remote_device_internal.h"

#include <poll.h>
#include <sys/socket.h>

namespace tc::server::worker {

absl::StatusOr<std::shared_ptr<RemoteDevice::Connection>> RemoteDevice::Take() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (worker_ == nullptr || failed()) {
    absl::Status h = health();
    return h.ok() ? absl::UnavailableError(
                        absl::StrCat("device ", info_.index, " is starting a new worker"))
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
    Lost(c.generation,
         absl::UnavailableError(absl::StrCat("its worker process stopped (", s.message(), ")")));
    const absl::Status h = health();
    return h.ok() ? absl::UnavailableError(
                        absl::StrCat("device ", info_.index, ": its worker process stopped"))
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

absl::StatusOr<RemoteDevice::Connection*> LaneConnection(runtime::Lane& lane,
                                                         const runtime::Device& d) {
  auto* c = static_cast<RemoteLane&>(lane).connection.get();
  if (c == nullptr) {
    absl::Status h = d.health();
    if (h.ok())
      h = absl::UnavailableError(
          absl::StrCat("device ", d.info().index, " is starting a new worker"));
    return h;
  }
  return c;
}

}  // namespace tc::server::worker
