// ModelInfer and ModelStreamInfer: each request converted (convert.h) and run through the
// same Compute path as tensorcompute.v1's.
#include <memory>
#include <optional>
#include <string>

#include "server/calls/call.h"
#include "server/env/grpc_status.h"
#include "server/calls/reactor.h"
#include "server/kserve/inference_service.h"
#include "server/kserve/models.h"
#include "server/pipeline/parse.h"
#include "server/pipeline/run.h"

namespace tc::server {

namespace {

// Bytes read out of system shared memory count against a device's budget: the least loaded
// one when the first are read, which the request then runs on.
ShmReadBudget ReadBudget(const ServiceEnv& env) {
  ShmReadBudget b;
  b.devices = env.devices;
  return b;
}

}  // namespace

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelInfer(grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* raw,
                                                           grpc::ByteBuffer* response) {
  auto* reactor = new CountedUnaryReactor(env_.life);
  struct State {
    explicit State(HostBuffers* buffers) : result(ComputeResult::Bytes::kBuffer, buffers) {}
    inf::ModelInferRequest request;
    // Large raw inputs, taken out of the message as it was parsed.
    OutsideData outside;
    ComputeSpec spec;
    // Sent beside the response message (InferResponseMessage), not copied into it.
    ComputeResult result;
    std::optional<ShmTarget> output_shm;
    ShmReadBudget budget;
  };
  auto state = std::make_shared<State>(env_.host_buffers);
  const absl::Status parsed = ParseWithOutside(*raw, &state->request, wire::SplitInferRequest,
                                               env_.host_buffers, &state->outside);
  const inf::ModelInferRequest* request = &state->request;
  const ServiceEnv* env = &env_;
  // The result answers in the model's response, converted first.
  auto call = std::make_shared<Call>(
      env, "ModelInfer", parsed.ok() ? ModelLabel(request->model_name()) : "",
      [env, state, request, response, reactor](const absl::Status& s) {
        const auto finish = [state, request, response, reactor](absl::Status out) {
          if (out.ok()) {
            inf::ModelInferResponse meta;
            out = ToInferResponse(*request, state->result, state->output_shm, &meta,
                                  /*bytes_beside=*/true);
            if (out.ok()) *response = EncodeInferResponse(meta, state->result, state->output_shm);
          }
          reactor->Finish(ToGrpcStatus(out));
        };
        // Writing the output into system shared memory is work for the request pool, not for
        // a device's completion thread; the drain counts it until the reply is out.
        if (s.ok() && state->output_shm && state->output_shm->region->file() != nullptr &&
            env->life->Enter()) {
          env->pool->Schedule([env, finish] {
            finish(absl::OkStatus());
            env->life->Leave();
          });
          return;
        }
        finish(s);
      });
  if (!call->Admit(*reactor)) return reactor;
  if (!parsed.ok()) {
    call->Finish(parsed);
    return reactor;
  }
  state->budget = ReadBudget(env_);
  // Shared-memory regions belong to the caller's identity; where tokens are required,
  // nothing of the request is looked at without one.
  const bool shm = UsesSharedMemory(*request);
  ShmLookup lookup;
  std::optional<std::string> identity;
  if (shm || env_.auth->requires_token()) {
    auto id = env_.auth->Identify(*ctx);
    if (!id.ok()) {
      call->Finish(id.status());
      return reactor;
    }
    if (shm) lookup = LookupFor(*id);
    identity = *std::move(id);
  }
  auto start = [env, ctx, request, state, call, lookup, identity] {
    // The request is this call's until it finishes: its raw inputs are computed on where
    // they lie.
    if (absl::Status s = ToComputeSpec(*request, env->options, lookup, &state->budget, &state->spec,
                                       &state->output_shm, &state->outside);
        !s.ok()) {
      call->Finish(s);
      return;
    }
    state->spec.identity = identity;
    StartCompute(*env, ctx, &state->spec, &state->result, call);
  };
  if (ConvertsOnThePool(*request)) {
    env_.pool->Schedule(std::move(start));
  } else {
    start();
  }
  return reactor;
}

namespace {

using StreamInferBase =
    grpc::ServerBidiReactor<inf::ModelInferRequest, inf::ModelStreamInferResponse>;

// ModelStreamInfer: requests one at a time, each a call of its own answered before the next
// is read; a request that fails is answered with its error_message (and its id) and the stream
// goes on.
class StreamInferReactor final : public PooledReactor<StreamInferBase> {
 public:
  StreamInferReactor(const ServiceEnv& env, const InferenceServiceImpl* service,
                     grpc::CallbackServerContext* ctx)
      : PooledReactor(ctx, env, /*method=*/nullptr) {
    if (!Authorized()) return;
    lookup_ = service->LookupFor(owner_);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    Post([this, ok] { HandleRead(ok); });
  }

  void OnWriteDone(bool ok) override {
    Post([this, ok] {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ok) {
        FinishLocked(absl::CancelledError("the response could not be written"));
      } else if (!finished_) {
        StartRead(&request_);
      }
    });
  }

 private:
  // On the pool: reading shared memory and converting typed contents are its work, as in
  // ModelInfer (the stream has nothing else in flight meanwhile).
  void HandleRead(bool ok) {
    if (!ok) {  // the client is done sending
      FinishOnce(absl::OkStatus());
      return;
    }
    if (env_.life->draining()) {
      FinishOnce(ShuttingDown());
      return;
    }
    // The last request's bytes go, and with them what they counted against the budget.
    spec_ = ComputeSpec();
    result_.ClearOutput();
    budget_ = ReadBudget(env_);
    // The request's computation keeps the reactor until it answers.
    Ref();
    auto call = std::make_shared<Call>(
        &env_, "ModelStreamInfer", ModelLabel(request_.model_name()),
        [this](const absl::Status& s) {
          if (s.ok() && output_shm_ && output_shm_->region->file() != nullptr) {
            Post([this] { Respond(absl::OkStatus()); });
          } else {
            Respond(s);
          }
          Unref();
        });
    if (absl::Status s =
            ToComputeSpec(request_, env_.options, lookup_, &budget_, &spec_, &output_shm_);
        !s.ok()) {
      call->Finish(s);
      return;
    }
    spec_.identity = owner_;
    StartCompute(env_, ctx_, &spec_, &result_, std::move(call));
  }

  // The result (or the error) as this request's response.
  void Respond(absl::Status out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    response_.Clear();
    if (out.ok()) {
      out = ToInferResponse(request_, result_, output_shm_, response_.mutable_infer_response());
    }
    if (!out.ok()) {
      response_.Clear();
      response_.set_error_message(std::string(out.message()));
      response_.mutable_infer_response()->set_id(request_.id());
    }
    // Each request has this one response, its last, as Triton says of its own responses
    // (clients asking for enable_empty_final_response wait for it).
    (*response_.mutable_infer_response()->mutable_parameters())["triton_final_response"]
        .set_bool_param(true);
    StartWrite(&response_);
  }

  ShmLookup lookup_;
  inf::ModelInferRequest request_;
  ComputeSpec spec_;
  std::optional<ShmTarget> output_shm_;
  ShmReadBudget budget_;
  ComputeResult result_{ComputeResult::Bytes::kString};
  inf::ModelStreamInferResponse response_;
};

}  // namespace

grpc::ServerBidiReactor<inf::ModelInferRequest, inf::ModelStreamInferResponse>*
InferenceServiceImpl::ModelStreamInfer(grpc::CallbackServerContext* ctx) {
  return new StreamInferReactor(env_, this, ctx);
}

}  // namespace tc::server
