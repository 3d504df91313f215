// One call, however it is answered: every handler and reactor of both front doors makes one.
// It is counted in flight under the drain from Enter (or Admit) until it is destroyed, or by
// its reactor until gRPC is done with it, so work it still holds finishes before the server
// stops; it is finished exactly once, with its
// metrics; and its outcome goes to the responder it was made with: a unary reactor's Finish,
// a response converted first (ModelInfer), one response of a stream (ModelStreamInfer), or a
// streaming reactor's Finish (PooledReactor).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "grpcpp/support/server_callback.h"
#include "kernels/catalog.h"
#include "server/env/grpc_status.h"
#include "server/env/service_env.h"

namespace tc::server {

// A unary reactor counted in flight under the drain until gRPC is done with its call: its
// response written out to the client (or the call cancelled), not only answered. A large
// result takes a while on the wire after Finish; the server stops only once it is out.
class CountedUnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit CountedUnaryReactor(Lifecycle* life) : life_(life), entered_(life->Enter()) {}
  // False (nothing counted) when made while the server drains.
  bool entered() const { return entered_; }
  void OnDone() override {
    if (entered_) life_->Leave();
    delete this;
  }
  // OnDone only counts and frees, so gRPC may run it on the thread that finished the call
  // (as its own default reactor's): otherwise every call woke an executor thread for it
  // (2-core machine, 4 KiB adds one at a time: 14% of the server's CPU time on that thread).
  bool InternalInlineable() override { return true; }

 private:
  Lifecycle* const life_;
  const bool entered_;
};

class Call {
 public:
  using Responder = std::function<void(const absl::Status&)>;

  // `method`: the name the metrics record it under; null for one that records nothing of its
  // own (a stream whose requests are each a call).
  Call(const ServiceEnv* env, const char* method, std::string op, Responder respond)
      : env_(env), method_(method), op_(std::move(op)), respond_(std::move(respond)) {}
  // Answers a unary reactor.
  Call(const ServiceEnv* env, grpc::ServerUnaryReactor* reactor, const char* method, std::string op)
      : Call(env, method, std::move(op),
             [reactor](const absl::Status& s) { reactor->Finish(ToGrpcStatus(s)); }) {
    this->reactor = reactor;
  }
  ~Call() {
    if (entered_) env_->life->Leave();
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // Counts the call in flight; false (nothing counted) once the server drains.
  bool Enter() {
    entered_ = env_->life->Enter();
    return entered_;
  }
  // Enter, or finish the call UNAVAILABLE.
  bool Admit() {
    if (Enter()) return true;
    Finish(ShuttingDown());
    return false;
  }
  // The unary handlers' prologue: Admit, then the caller's identity (`identify`: the
  // service's Auth unless given). Null when the call is finished already: UNAVAILABLE while
  // the server drains, or the identity's error.
  std::optional<std::string> AdmitCaller(const grpc::CallbackServerContext& ctx) {
    return AdmitCaller([&] { return env_->auth->Identify(ctx); });
  }
  template <typename Identify>
  std::optional<std::string> AdmitCaller(Identify identify) {
    if (!Admit()) return std::nullopt;
    absl::StatusOr<std::string> id = identify();
    if (!id.ok()) {
      Finish(id.status());
      return std::nullopt;
    }
    return *std::move(id);
  }
  // For a call its reactor counts: finishes it UNAVAILABLE when the reactor was made while
  // the server drains. The call is counted too, until it is destroyed: gRPC may be done with
  // the reactor (its response written) while a device's completion thread still lets go of
  // the call's work (its storage, its regions, its device reservation), and the server must
  // not stop under that.
  bool Admit(const CountedUnaryReactor& counted) {
    if (counted.entered()) {
      env_->life->Hold();
      entered_ = true;
      return true;
    }
    Finish(ShuttingDown());
    return false;
  }

  // Records the call and hands `s` to the responder, the first time only: false after.
  bool Finish(const absl::Status& s) {
    if (finished_.exchange(true, std::memory_order_acq_rel)) return false;
    if (method_ != nullptr) {
      const absl::Time now = absl::Now();
      env_->metrics->RecordCall(method_, op_, absl::StatusCodeToString(s.code()), now - start_);
      env_->metrics->AddBytes(method_, received.load(), sent.load());
      // A compute request counts for its model (an op of the catalog, or "expression"), as
      // the open inference protocol's statistics report them.
      if (inference && (op_ == "expression" || FindOp(op_) != nullptr)) {
        env_->metrics->RecordInference(op_, s.ok(), start_, now, stages);
      }
    }
    Responder respond = std::move(respond_);
    respond_ = nullptr;
    respond(s);
    return true;
  }

  // The op label the metrics give it, where it is known only once the request is read.
  void set_op(std::string op) { op_ = std::move(op); }

  // The unary reactor it answers; null for the others.
  grpc::ServerUnaryReactor* reactor = nullptr;
  // A compute request (the model statistics count it), and when it reached each stage.
  bool inference = false;
  StageTimes stages;
  // Tensor bytes received and sent, for the metrics.
  std::atomic<int64_t> received{0};
  std::atomic<int64_t> sent{0};

 private:
  const ServiceEnv* env_;
  const char* method_;
  std::string op_;
  const absl::Time start_ = absl::Now();
  Responder respond_;
  bool entered_ = false;
  std::atomic<bool> finished_{false};
};

}  // namespace tc::server
