#include "server/service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/codec.h"
#include "server/grpc_status.h"
#include "server/job.h"
#include "server/reactor.h"

#ifndef TC_VERSION
#define TC_VERSION "unknown"
#endif
#ifndef TC_BUILD
#define TC_BUILD "unknown"
#endif

namespace tc::server {

TensorServiceImpl::TensorServiceImpl(runtime::DeviceSet* devices, ThreadPool* request_pool,
                                     ResidentStore* resident, Metrics* metrics,
                                     const Auth* auth, ServiceOptions options,
                                     Lifecycle* life)
    : env_{devices, request_pool, resident, metrics, auth, std::move(options), life} {}

absl::Status ShuttingDown() {
  return absl::UnavailableError("the server is shutting down; retry on another replica");
}

// Records one unary call in the metrics when it finishes.
struct UnaryCall {
  const TensorServiceImpl::Env* env;
  grpc::ServerUnaryReactor* reactor;
  const char* method;
  std::string op;
  absl::Time start = absl::Now();
  int64_t received = 0;
  int64_t sent = 0;
  bool entered = false;

  // Counts the call as in flight, or finishes it UNAVAILABLE when the server drains.
  bool Admit() {
    entered = env->life->Enter();
    if (!entered) Finish(ShuttingDown());
    return entered;
  }

  void Finish(const absl::Status& s) {
    env->metrics->RecordCall(method, op, absl::StatusCodeToString(s.code()), absl::Now() - start);
    env->metrics->AddBytes(method, received, sent);
    reactor->Finish(ToGrpcStatus(s));
    if (entered) env->life->Leave();
  }
};

namespace {

// Whether a Compute touches resident tensors, which belong to the caller's identity.
bool NeedsIdentity(const v1::ComputeRequest& request) {
  if (request.keep_output_resident()) return true;
  for (const v1::Tensor& t : request.inputs()) {
    if (!t.handle().empty()) return true;
  }
  return false;
}

// Requests up to this many input bytes run on the gRPC thread on the CPU backend.
constexpr int64_t kInlineBytes = 64 << 10;

absl::Status TooLargeForUnary(const Plan& plan, absl::string_view op, int64_t limit) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "the result of '", op, "' would be ", ShapeToString(plan.out_shape), " ",
      DTypeName(plan.out_dtype), ", ", plan.out_storage_bytes,
      " bytes, over this server's limit of ", limit,
      " bytes for one message; use ComputeStream, or keep the output resident"));
}

}  // namespace

grpc::ServerUnaryReactor* TensorServiceImpl::Compute(grpc::CallbackServerContext* ctx,
                                                     const v1::ComputeRequest* request,
                                                     v1::ComputeResponse* response) {
  auto call = std::make_shared<UnaryCall>(UnaryCall{&env_, ctx->DefaultReactor(), "Compute",
                                                    request->op()});
  if (!call->Admit()) return call->reactor;
  // The caller's identity, needed up front where tokens are required, else only where
  // resident tensors are touched.
  std::string owner;
  if (env_.auth->requires_token() || NeedsIdentity(*request)) {
    auto id = env_.auth->Identify(*ctx);
    if (!id.ok()) {
      call->Finish(id.status());
      return call->reactor;
    }
    owner = *std::move(id);
  }
  // `request` and `response` stay valid until Finish.
  auto work = [this, ctx, request, response, call, owner] {
    if (ctx->IsCancelled()) {
      call->Finish(absl::CancelledError("cancelled before it ran"));
      return;
    }
    for (const v1::Tensor& t : request->inputs()) call->received += t.data().size();
    auto prepared = ComputeJob::Prepare(*request, owner, false, env_, DeadlineOf(*ctx));
    if (!prepared.ok()) {
      call->Finish(prepared.status());
      return;
    }
    std::shared_ptr<ComputeJob> job = *std::move(prepared);
    const Plan& plan = job->plan();
    const Env& env = env_;

    if (job->keep_output_resident()) {
      auto out = job->AllocateOutput(DeadlineOf(*ctx));
      if (!out.ok()) {
        call->Finish(out.status());
        return;
      }
      runtime::StoragePtr storage = *out;
      job->Run(storage->data(), [&env, job, storage, owner, response, call](absl::Status s) {
        if (!s.ok()) {
          call->Finish(s);
          return;
        }
        auto r = env.resident->Add(owner, storage, job->OutputView(), job->ttl_seconds());
        if (!r.ok()) {
          call->Finish(r.status());
          return;
        }
        SetTensorMeta((*r)->view, response->mutable_output());
        response->mutable_output()->set_handle((*r)->handle);
        call->Finish(absl::OkStatus());
      });
      return;
    }

    if (plan.out_storage_bytes > env_.options.max_message_bytes) {
      call->Finish(TooLargeForUnary(plan, request->op(), env_.options.max_message_bytes));
      return;
    }
    if (job->device().host_memory()) {
      // The kernels write straight into the response.
      std::byte* out = PrepareOutput(plan, response->mutable_output());
      call->sent = plan.out_storage_bytes;
      job->Run(out, [job, call](absl::Status s) { call->Finish(s); });
      return;
    }
    auto out = job->AllocateOutput(DeadlineOf(*ctx));
    if (!out.ok()) {
      call->Finish(out.status());
      return;
    }
    runtime::StoragePtr storage = *out;
    if (plan.out_storage_bytes <= job->device().max_read_back()) {
      // Small: the device copies the result into the response as part of the run.
      std::byte* host = PrepareOutput(plan, response->mutable_output());
      call->sent = plan.out_storage_bytes;
      job->Run(storage->data(), [job, storage, call](absl::Status s) { call->Finish(s); },
               {host, plan.out_storage_bytes});
      return;
    }
    job->Run(storage->data(), [&env, job, storage, response, call](absl::Status s) {
      if (!s.ok()) {
        call->Finish(s);
        return;
      }
      // Copying out blocks on the device: not on its completion thread.
      env.pool->Schedule([job, storage, response, call] {
        std::byte* host = PrepareOutput(job->plan(), response->mutable_output());
        call->sent = job->plan().out_storage_bytes;
        call->Finish(job->device().Read(job->lane(), *storage, 0, host, storage->bytes()));
      });
    });
  };
  // A small request takes a few microseconds to compute on the host, or to hand to a GPU
  // without waiting for it: it starts right here rather than paying for a trip through the
  // pool. Everything else (large copies, large computations) goes to the pool.
  int64_t bytes = 0;
  bool inline_only = !request->keep_output_resident();
  for (const v1::Tensor& t : request->inputs()) {
    bytes += static_cast<int64_t>(t.data().size());
    inline_only = inline_only && t.handle().empty() && t.storage_bytes() == 0;
  }
  if (bytes <= kInlineBytes && inline_only && env_.devices->size() == 1) {
    if (env_.devices->at(0).host_memory()) {
      work();
      return call->reactor;
    }
    if (TrySmallOnDevice(ctx, request, response, call)) return call->reactor;
  }
  env_.pool->Schedule(std::move(work));
  return call->reactor;
}

bool TensorServiceImpl::TrySmallOnDevice(grpc::CallbackServerContext* ctx,
                                         const v1::ComputeRequest* request,
                                         v1::ComputeResponse* response,
                                         std::shared_ptr<UnaryCall> call) {
  for (const v1::Tensor& t : request->inputs()) call->received += t.data().size();
  // No handles and nothing kept: no identity needed.
  auto prepared = ComputeJob::Prepare(*request, std::string(), false, env_,
                                      DeadlineOf(*ctx), /*stage_inline=*/false);
  if (!prepared.ok()) {
    call->Finish(prepared.status());
    return true;
  }
  std::shared_ptr<ComputeJob> job = *std::move(prepared);
  const Plan& plan = job->plan();
  if (plan.out_storage_bytes + job->input_bytes() > job->device().max_small_bytes()) {
    call->received = 0;
    return false;
  }
  std::byte* out = PrepareOutput(plan, response->mutable_output());
  std::function<void(absl::Status)> done = [job, call](absl::Status s) { call->Finish(s); };
  if (!job->TryRunSmall(out, done)) {
    // Busy or short of memory: the ordinary path, which may wait.
    response->clear_output();
    call->received = 0;
    return false;
  }
  call->sent = plan.out_storage_bytes;
  return true;
}

namespace {

using StreamBase = grpc::ServerBidiReactor<v1::ComputeStreamRequest, v1::TensorStreamMessage>;

// Header, then the streamed inputs' chunks; the output goes back as a header and chunks (or a
// header with a handle when kept resident). Chunks are handled in arrival order, each copied
// to the device while the next one is being received.
class ComputeStreamReactor final : public PooledReactor<StreamBase> {
 public:
  ComputeStreamReactor(grpc::CallbackServerContext* ctx, const TensorServiceImpl::Env& env)
      : PooledReactor(ctx, env, "ComputeStream") {
    if (Authorized()) StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    Post([this, ok] { HandleRead(ok); });
  }
  void OnWriteDone(bool ok) override { WriteDone<v1::TensorStreamMessage>(ok); }

 private:
  void HandleRead(bool ok) {
    // Serializes the handling of messages in the order they arrived: the next read can only
    // complete after this one started, and waits here until this one is done.
    std::lock_guard<std::mutex> order(order_mu_);
    v1::ComputeStreamRequest msg;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;
      if (ok) {
        msg.Swap(&in_);
        StartRead(&in_);
      }
    }
    if (!ok) {
      EndOfInput();
      return;
    }
    absl::Status s;
    if (msg.has_header()) {
      s = Header(msg.release_header());
    } else if (msg.has_chunk()) {
      if (job_ == nullptr) {
        s = absl::InvalidArgumentError("a chunk came before the header; send the header first");
      } else {
        received_ += static_cast<int64_t>(msg.chunk().data().size());
        s = job_->AcceptChunk(msg.chunk());
      }
    } else {
      s = absl::InvalidArgumentError("a message with neither header nor chunk");
    }
    if (!s.ok()) FinishOnce(s);
  }

  absl::Status Header(v1::ComputeRequest* header) {
    header_.reset(header);
    if (job_ != nullptr) return absl::InvalidArgumentError("a second header in one stream");
    op_ = header_->op();
    for (const v1::Tensor& t : header_->inputs()) received_ += t.data().size();
    auto job = ComputeJob::Prepare(*header_, owner_, true, env_, DeadlineOf(*ctx_));
    if (!job.ok()) return job.status();
    job_ = *std::move(job);
    return absl::OkStatus();
  }

  void EndOfInput() {
    if (job_ == nullptr) {
      FinishOnce(absl::InvalidArgumentError("the stream ended before its header"));
      return;
    }
    if (auto s = job_->CheckComplete(); !s.ok()) {
      FinishOnce(s);
      return;
    }
    auto out = job_->AllocateOutput(DeadlineOf(*ctx_));
    if (!out.ok()) {
      FinishOnce(out.status());
      return;
    }
    out_ = *std::move(out);
    Ref();
    job_->Run(out_->data(), [this](absl::Status s) {
      // Perhaps on the device's completion thread: hand over to the pool.
      Post([this, s] { AfterRun(s); });
      Unref();
    });
  }

  void AfterRun(const absl::Status& s) {
    if (!s.ok()) {
      FinishOnce(s);
      return;
    }
    if (job_->keep_output_resident()) {
      auto r = env_.resident->Add(owner_, out_, job_->OutputView(), job_->ttl_seconds());
      if (!r.ok()) {
        FinishOnce(r.status());
        return;
      }
      auto header = std::make_shared<v1::Tensor>();
      SetTensorMeta((*r)->view, header.get());
      header->set_handle((*r)->handle);
      StartSending<v1::TensorStreamMessage>(1, [header](int64_t, v1::TensorStreamMessage* m) {
        *m->mutable_header() = *header;
        return absl::OkStatus();
      });
      return;
    }
    const int64_t bytes = out_->bytes();
    const int64_t chunk = env_.options.chunk_bytes;
    const int64_t chunks = (bytes + chunk - 1) / chunk;
    StartSending<v1::TensorStreamMessage>(
        1 + chunks, [this, bytes, chunk](int64_t k, v1::TensorStreamMessage* m) {
          if (k == 0) {
            SetTensorMeta(job_->OutputView(), m->mutable_header());
            return absl::OkStatus();
          }
          const int64_t at = (k - 1) * chunk;
          const int64_t len = std::min(chunk, bytes - at);
          v1::DataChunk* c = m->mutable_chunk();
          c->set_offset(at);
          std::string* data = c->mutable_data();
          data->resize(static_cast<size_t>(len));
          sent_ += len;
          return job_->device().Read(job_->lane(), *out_, at, data->data(), len);
        });
  }

  v1::ComputeStreamRequest in_;
  std::mutex order_mu_;
  std::unique_ptr<v1::ComputeRequest> header_;
  std::shared_ptr<ComputeJob> job_;
  runtime::StoragePtr out_;
};

}  // namespace

StreamBase* TensorServiceImpl::ComputeStream(grpc::CallbackServerContext* ctx) {
  return new ComputeStreamReactor(ctx, env_);
}

}  // namespace tc::server

namespace tc::server {
namespace {

// A header (a new tensor, or a part of an existing one's storage), then chunks in order.
class UploadReactor final : public PooledReactor<grpc::ServerReadReactor<v1::UploadRequest>> {
 public:
  UploadReactor(grpc::CallbackServerContext* ctx, const TensorServiceImpl::Env& env,
                v1::UploadResponse* response)
      : PooledReactor(ctx, env, "Upload"), response_(response) {
    if (Authorized()) StartRead(&in_);
  }
  ~UploadReactor() override {
    if (writing_) part_of_->writers.fetch_sub(1);
  }

  void OnReadDone(bool ok) override {
    Post([this, ok] { HandleRead(ok); });
  }

 private:
  void HandleRead(bool ok) {
    std::lock_guard<std::mutex> order(order_mu_);
    v1::UploadRequest msg;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;
      if (ok) {
        msg.Swap(&in_);
        StartRead(&in_);
      }
    }
    absl::Status s;
    if (!ok) {
      s = EndOfInput();
    } else if (msg.has_header()) {
      s = Header(msg.header());
    } else if (msg.has_chunk()) {
      s = Chunk(msg.chunk());
    } else {
      s = absl::InvalidArgumentError("a message with neither header nor chunk");
    }
    if (!s.ok() || !ok) FinishOnce(s);
  }

  absl::Status Header(const v1::UploadHeader& h) {
    if (storage_ != nullptr) return absl::InvalidArgumentError("a second header in one stream");
    if (!h.handle().empty()) {
      // A part of an existing tensor's storage.
      auto r = env_.resident->Find(owner_, h.handle());
      if (!r.ok()) return r.status();
      if (h.offset() < 0 || h.offset() > (*r)->storage->bytes()) {
        return absl::InvalidArgumentError(absl::StrCat("offset ", h.offset(),
                                                       " is outside the tensor's ",
                                                       (*r)->storage->bytes(), " bytes"));
      }
      part_of_ = *std::move(r);
      part_of_->writers.fetch_add(1);
      writing_ = true;
      storage_ = part_of_->storage;
      start_ = h.offset();
      lane_ = storage_->device().AcquireLane();
      return absl::OkStatus();
    }
    const v1::Tensor& t = h.tensor();
    auto view = DecodeView(t, "tensor");
    if (!view.ok()) return view.status();
    view_ = *std::move(view);
    view_.storage_bytes = t.data().empty() ? t.storage_bytes()
                                           : static_cast<int64_t>(t.data().size());
    if (auto s = ValidateView(view_, "tensor"); !s.ok()) return s;
    if (view_.storage_bytes > env_.options.max_request_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "tensor of ", view_.storage_bytes, " bytes exceeds this server's limit of ",
          env_.options.max_request_bytes, " bytes"));
    }
    if (auto s = env_.resident->CheckQuota(owner_, view_.storage_bytes); !s.ok()) return s;
    ttl_ = h.ttl_seconds();
    runtime::Device& d = env_.devices->LeastLoaded();
    // Zeroed: a tensor whose parts are still to come must not show old memory.
    auto storage = d.Allocate(view_.storage_bytes, true, DeadlineOf(*ctx_));
    if (!storage.ok()) return storage.status();
    storage_ = *std::move(storage);
    lane_ = d.AcquireLane();
    if (!t.data().empty()) {
      if (view_.dtype == DType::kBool) {
        if (auto s = CheckBoolBytes(t.data().data(), view_.storage_bytes, "tensor"); !s.ok()) {
          return s;
        }
      }
      received_ += view_.storage_bytes;
      got_ = view_.storage_bytes;
      return d.Write(*lane_, *storage_, 0, t.data().data(), view_.storage_bytes);
    }
    return absl::OkStatus();
  }

  absl::Status Chunk(const v1::DataChunk& c) {
    if (storage_ == nullptr) {
      return absl::InvalidArgumentError("a chunk came before the header; send the header first");
    }
    if (c.offset() != start_ + got_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk at byte ", c.offset(), " but the next expected byte is ", start_ + got_,
          "; send chunks in order, without gaps"));
    }
    const auto len = static_cast<int64_t>(c.data().size());
    if (len > storage_->bytes() - c.offset()) {
      return absl::InvalidArgumentError(absl::StrCat("chunk of ", len, " bytes at byte ",
                                                     c.offset(), " overruns the tensor's ",
                                                     storage_->bytes(), " bytes"));
    }
    const DType dtype = part_of_ != nullptr ? part_of_->view.dtype : view_.dtype;
    if (dtype == DType::kBool) {
      if (auto s = CheckBoolBytes(c.data().data(), len, "tensor", c.offset()); !s.ok()) return s;
    }
    received_ += len;
    got_ += len;
    return storage_->device().Write(*lane_, *storage_, c.offset(), c.data().data(), len);
  }

  absl::Status EndOfInput() {
    if (storage_ == nullptr) return absl::InvalidArgumentError("the stream ended before its header");
    // Every byte on the device before anyone can use the tensor.
    if (auto s = storage_->device().Sync(*lane_); !s.ok()) return s;
    response_->set_bytes_received(got_);
    if (part_of_ != nullptr) {
      // Done writing: readable as soon as the client hears so.
      part_of_->writers.fetch_sub(1);
      writing_ = false;
      SetTensorMeta(part_of_->view, response_->mutable_tensor());
      response_->mutable_tensor()->set_handle(part_of_->handle);
      response_->set_expires_unix_seconds(absl::ToUnixSeconds(part_of_->expires));
      return absl::OkStatus();
    }
    // Whole, or only reserved (its parts to come on other streams).
    if (got_ != 0 && got_ != view_.storage_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("the stream ended after ", got_, " of ",
                                                     view_.storage_bytes, " bytes"));
    }
    auto r = env_.resident->Add(owner_, storage_, view_, ttl_);
    if (!r.ok()) return r.status();
    SetTensorMeta((*r)->view, response_->mutable_tensor());
    response_->mutable_tensor()->set_handle((*r)->handle);
    response_->set_expires_unix_seconds(absl::ToUnixSeconds((*r)->expires));
    return absl::OkStatus();
  }

  v1::UploadResponse* response_;
  v1::UploadRequest in_;
  std::mutex order_mu_;
  runtime::StoragePtr storage_;
  std::unique_ptr<runtime::Lane> lane_;
  std::shared_ptr<ResidentTensor> part_of_;
  bool writing_ = false;
  TensorView view_;
  int64_t ttl_ = 0;
  int64_t start_ = 0;
  int64_t got_ = 0;
};

class DownloadReactor final
    : public PooledReactor<grpc::ServerWriteReactor<v1::TensorStreamMessage>> {
 public:
  DownloadReactor(grpc::CallbackServerContext* ctx, const TensorServiceImpl::Env& env,
                  const v1::DownloadRequest* request)
      : PooledReactor(ctx, env, "Download") {
    if (Authorized()) Post([this, request] { Begin(*request); });
  }
  void OnWriteDone(bool ok) override { WriteDone<v1::TensorStreamMessage>(ok); }

 private:
  void Begin(const v1::DownloadRequest& request) {
    auto r = env_.resident->Find(owner_, request.handle());
    if (!r.ok()) {
      FinishOnce(r.status());
      return;
    }
    tensor_ = *std::move(r);
    if (tensor_->writers.load() > 0) {
      FinishOnce(absl::FailedPreconditionError("an upload into this tensor is still in progress"));
      return;
    }
    if (absl::Status h = tensor_->storage->device().health(); !h.ok()) {
      FinishOnce(h);
      return;
    }
    const int64_t size = tensor_->storage->bytes();
    const int64_t begin = request.offset();
    const int64_t length = request.length() == 0 ? size - begin : request.length();
    if (begin < 0 || length < 0 || begin > size || length > size - begin) {
      FinishOnce(absl::OutOfRangeError(absl::StrCat("range [", begin, ", +", length,
                                                    ") is outside the tensor's ", size,
                                                    " bytes")));
      return;
    }
    // A chunk and its framing must fit in one message.
    const int64_t max_message = env_.options.max_message_bytes;
    const int64_t max_chunk = std::max(max_message - 1024, max_message / 2);
    const int64_t chunk = request.chunk_bytes() > 0 ? std::min(request.chunk_bytes(), max_chunk)
                                                    : env_.options.chunk_bytes;
    lane_ = tensor_->storage->device().AcquireLane();
    const int64_t chunks = (length + chunk - 1) / chunk;
    StartSending<v1::TensorStreamMessage>(
        1 + chunks, [this, begin, length, chunk](int64_t k, v1::TensorStreamMessage* m) {
          if (k == 0) {
            SetTensorMeta(tensor_->view, m->mutable_header());
            m->mutable_header()->set_handle(tensor_->handle);
            return absl::OkStatus();
          }
          const int64_t at = (k - 1) * chunk;
          const int64_t len = std::min(chunk, length - at);
          v1::DataChunk* c = m->mutable_chunk();
          c->set_offset(begin + at);
          std::string* data = c->mutable_data();
          data->resize(static_cast<size_t>(len));
          sent_ += len;
          return tensor_->storage->device().Read(*lane_, *tensor_->storage, begin + at,
                                                 data->data(), len);
        });
  }

  std::shared_ptr<ResidentTensor> tensor_;
  std::unique_ptr<runtime::Lane> lane_;
};

}  // namespace

grpc::ServerReadReactor<v1::UploadRequest>* TensorServiceImpl::Upload(
    grpc::CallbackServerContext* ctx, v1::UploadResponse* response) {
  return new UploadReactor(ctx, env_, response);
}

grpc::ServerWriteReactor<v1::TensorStreamMessage>* TensorServiceImpl::Download(
    grpc::CallbackServerContext* ctx, const v1::DownloadRequest* request) {
  return new DownloadReactor(ctx, env_, request);
}

grpc::ServerUnaryReactor* TensorServiceImpl::Release(grpc::CallbackServerContext* ctx,
                                                     const v1::ReleaseRequest* request,
                                                     v1::ReleaseResponse* response) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "Release", ""};
  if (!call.Admit()) return call.reactor;
  auto id = env_.auth->Identify(*ctx);
  if (!id.ok()) {
    call.Finish(id.status());
    return call.reactor;
  }
  const std::string& owner = *id;
  // All or nothing: every handle is checked before any is released.
  for (const std::string& h : request->handles()) {
    if (auto r = env_.resident->Find(owner, h); !r.ok()) {
      call.Finish(r.status());
      return call.reactor;
    }
  }
  int64_t released = 0;
  for (const std::string& h : request->handles()) {
    if (auto r = env_.resident->Release(owner, h); r.ok()) released += *r;
  }
  response->set_released_bytes(released);
  call.Finish(absl::OkStatus());
  return call.reactor;
}

grpc::ServerUnaryReactor* TensorServiceImpl::ListOps(grpc::CallbackServerContext* ctx,
                                                     const v1::ListOpsRequest* /*request*/,
                                                     v1::ListOpsResponse* response) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "ListOps", ""};
  if (!call.Admit()) return call.reactor;
  if (auto id = env_.auth->Identify(*ctx); !id.ok()) {
    call.Finish(id.status());
    return call.reactor;
  }
  for (const CatalogEntry& e : Catalog()) {
    v1::OpInfo* info = response->add_ops();
    info->set_name(e.spec.name);
    info->set_arity(e.spec.arity);
    info->set_description(e.spec.description);
    for (DType t : e.spec.dtypes) info->add_dtypes(DTypeToProto(t));
    for (const AttrSpec& a : e.spec.attrs) {
      v1::AttributeInfo* ai = info->add_attributes();
      ai->set_name(a.name);
      ai->set_type(std::string(AttrTypeName(a.type)));
      ai->set_required(a.required);
      ai->set_description(a.description);
      if (!a.required) ai->set_default_value(AttrValueToString(a.default_value));
    }
  }
  call.Finish(absl::OkStatus());
  return call.reactor;
}

grpc::ServerUnaryReactor* TensorServiceImpl::ServerInfo(grpc::CallbackServerContext* ctx,
                                                        const v1::ServerInfoRequest* /*request*/,
                                                        v1::ServerInfoResponse* response) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "ServerInfo", ""};
  if (!call.Admit()) return call.reactor;
  if (auto id = env_.auth->Identify(*ctx); !id.ok()) {
    call.Finish(id.status());
    return call.reactor;
  }
  const ServiceOptions& o = env_.options;
  response->set_version(TC_VERSION);
  response->set_build(TC_BUILD);
  response->set_backend(o.backend);
  response->set_metrics_port(o.metrics_port);
  for (int i = 0; i < env_.devices->size(); ++i) {
    const runtime::Device& d = env_.devices->at(i);
    v1::DeviceInfo* di = response->add_devices();
    di->set_index(d.info().index);
    di->set_kind(d.info().kind);
    di->set_name(d.info().name);
    di->set_memory_total_bytes(d.info().total_memory);
    di->set_memory_budget_bytes(d.memory_budget());
    di->set_memory_in_use_bytes(d.memory_in_use());
    di->set_multiprocessors(d.info().multiprocessors);
    di->set_streams(d.info().streams);
    di->set_requests_in_flight(d.in_flight());
    if (absl::Status h = d.health(); !h.ok()) di->set_failure(std::string(h.message()));
  }
  v1::Limits* l = response->mutable_limits();
  l->set_max_message_bytes(o.max_message_bytes);
  l->set_max_request_bytes(o.max_request_bytes);
  l->set_max_elements(o.max_elements);
  l->set_max_rank(o.max_rank);
  l->set_max_concurrent_per_device(o.max_concurrent_per_device);
  const ResidentOptions& r = env_.resident->options();
  l->set_resident_quota_bytes(r.quota_bytes);
  l->set_resident_max_tensors(r.max_tensors);
  l->set_resident_default_ttl_seconds(absl::ToInt64Seconds(r.default_ttl));
  l->set_resident_max_ttl_seconds(absl::ToInt64Seconds(r.max_ttl));
  l->set_chunk_bytes(o.chunk_bytes);
  response->set_resident_tensors(env_.resident->count());
  response->set_resident_bytes(env_.resident->bytes());
  call.Finish(absl::OkStatus());
  return call.reactor;
}

}  // namespace tc::server
