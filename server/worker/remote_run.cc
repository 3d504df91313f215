// RemoteDevice (remote_device.h): runs sent without waiting and finished by the completion
// thread, and small runs with their inputs and output in the staging buffer, in one round trip.
#include "server/worker/remote_device_internal.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cstring>

#include "kernels/expr/program.h"
#include "server/env/log.h"

namespace tc::server::worker {

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
  Send(static_cast<RemoteLane&>(lane).connection, request, static_cast<std::byte*>(read_back.host),
       0, read_back.bytes, std::move(done));
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
      done(sent.code() == absl::StatusCode::kUnavailable ? Outcome(cn, sent, pb::Reply()) : sent);
      return;
    }
    cn.running = true;
    cn.take_out = [&cn, host, staging_at, bytes](const absl::Status& io, const pb::Reply& reply) {
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

}  // namespace tc::server::worker
