// Shared machinery of the streaming reactors: work posted to the request pool keeps the
// reactor alive; the call (a Call, as every handler's) is counted in flight until the reactor
// goes and finished exactly once, with its metrics; reactions only post, so a reaction that
// gRPC runs inline never meets a lock its caller holds; and a sender that fills the next
// message while the previous one is on the wire.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/calls/call.h"
#include "server/env/grpc_status.h"
#include "server/env/service_env.h"
#include "server/env/auth.h"
#include "util/thread_pool.h"

namespace tc::server {

inline absl::Time DeadlineOf(const grpc::CallbackServerContext& ctx) {
  return absl::FromChrono(ctx.deadline());
}

template <class Base>
class PooledReactor : public Base {
 public:
  // `method`: as Call takes it (null: the stream's requests are each a call of their own).
  PooledReactor(grpc::CallbackServerContext* ctx, const ServiceEnv& env, const char* method)
      : ctx_(ctx),
        env_(env),
        identity_(env.auth->Identify(*ctx)),
        owner_(identity_.ok() ? *identity_ : std::string()),
        deadline_(DeadlineOf(*ctx)),
        session_(SessionKey(*ctx, owner_)),
        call_(&env, method, std::string(),
              [this](const absl::Status& s) { this->Finish(ToGrpcStatus(s)); }),
        entered_(call_.Enter()) {}

  void OnDone() override { Unref(); }
  void OnCancel() override {
    Post([this] { FinishOnce(absl::CancelledError("cancelled by the client or its deadline")); });
  }

 protected:
  virtual ~PooledReactor() = default;

  // False, with the call finishing UNAVAILABLE when the server drains, or UNAUTHENTICATED when
  // the caller could not be identified.
  bool Authorized() {
    if (entered_ && identity_.ok()) return true;
    Post([this] { FinishOnce(entered_ ? identity_.status() : ShuttingDown()); });
    return false;
  }

  // Keeps the reactor alive across work that is not a posted task (a device completion).
  void Ref() { refs_.fetch_add(1); }
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  void Post(std::function<void()> fn) {
    refs_.fetch_add(1);
    env_.pool->Schedule([this, fn = std::move(fn)] {
      fn();
      Unref();
    });
  }

  // Finishes the call unless it is finished already. Takes mu_.
  void FinishOnce(const absl::Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(s);
  }
  void FinishLocked(const absl::Status& s) {
    if (finished_) return;
    finished_ = true;
    call_.Finish(s);
  }

  // Sends `total` messages made by fill(k, msg), k = 0..total-1, each filled on the pool while
  // the one before it is being written, then finishes with OK. Only for writing reactors.
  template <class Msg>
  void StartSending(int64_t total, std::function<absl::Status(int64_t, Msg*)> fill) {
    auto* s = new SendState<Msg>();
    s->total = total;
    s->fill = std::move(fill);
    send_state_ = std::shared_ptr<void>(s, [](void* p) { delete static_cast<SendState<Msg>*>(p); });
    if (total == 0) {
      FinishOnce(absl::OkStatus());
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      s->filling = true;
    }
    Post([this, s] { FillLoop<Msg>(s); });
  }

  // For writing reactors: call from OnWriteDone.
  template <class Msg>
  void WriteDone(bool ok) {
    Post([this, ok] {
      auto* s = static_cast<SendState<Msg>*>(send_state_.get());
      std::lock_guard<std::mutex> lock(mu_);
      if (!ok) {
        FinishLocked(absl::CancelledError("the client stopped receiving"));
        return;
      }
      s->writing.reset();
      ++s->sent;
      if (s->ready != nullptr) {
        s->writing = std::move(s->ready);
        if (!finished_) this->StartWrite(s->writing.get());
        if (!s->filling && s->next < s->total) {
          s->filling = true;
          Post([this, s] { FillLoop<Msg>(s); });
        }
      } else if (s->sent == s->total) {
        FinishLocked(absl::OkStatus());
      }
    });
  }

  // Valid until the call is done: work posted after a cancellation may run later, and reads
  // the deadline and session key taken here instead.
  grpc::CallbackServerContext* ctx_;
  const ServiceEnv& env_;
  const absl::StatusOr<std::string> identity_;
  const std::string owner_;
  // The call's deadline and session key (SessionKey), taken while the context is sure to be
  // there.
  const absl::Time deadline_;
  const std::string session_;
  // The call: its op label and bytes for the metrics (call_.set_op, call_.received, .sent).
  Call call_;
  // Counted as in flight until destroyed; false when refused for the drain.
  const bool entered_;
  std::mutex mu_;
  bool finished_ = false;

 private:
  template <class Msg>
  struct SendState {
    int64_t total = 0;
    std::function<absl::Status(int64_t, Msg*)> fill;
    int64_t next = 0;
    int64_t sent = 0;
    bool filling = false;
    std::unique_ptr<Msg> writing;
    std::unique_ptr<Msg> ready;
  };

  template <class Msg>
  void FillLoop(SendState<Msg>* s) {
    for (;;) {
      int64_t k;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (finished_ || s->next >= s->total || s->ready != nullptr) {
          s->filling = false;
          return;
        }
        k = s->next++;
      }
      auto m = std::make_unique<Msg>();
      absl::Status st = s->fill(k, m.get());
      std::lock_guard<std::mutex> lock(mu_);
      if (!st.ok()) {
        s->filling = false;
        FinishLocked(st);
        return;
      }
      if (finished_) {
        s->filling = false;
        return;
      }
      if (s->writing == nullptr) {
        s->writing = std::move(m);
        this->StartWrite(s->writing.get());
      } else {
        s->ready = std::move(m);
      }
    }
  }

  std::atomic<int> refs_{1};
  std::shared_ptr<void> send_state_;
};

}  // namespace tc::server
