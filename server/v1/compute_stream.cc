// ComputeStream: a header, then the streamed inputs' chunks; the output as a header and chunks.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/calls/reactor.h"
#include "server/v1/codec.h"
#include "server/pipeline/job.h"
#include "server/pipeline/parse.h"
#include "server/v1/decode.h"
#include "server/v1/service.h"

namespace tc::server {

namespace {

using StreamBase = grpc::ServerBidiReactor<grpc::ByteBuffer, v1::TensorStreamMessage>;

// Header, then the streamed inputs' chunks; the output goes back as a header and chunks (or a
// header with a handle when kept resident). Chunks are handled in arrival order, each copied
// to the device while the next one is being received.
class ComputeStreamReactor final : public PooledReactor<StreamBase> {
 public:
  ComputeStreamReactor(grpc::CallbackServerContext* ctx, const ServiceEnv& env)
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
    grpc::ByteBuffer raw;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;
      if (ok) {
        raw.Swap(&in_);
        StartRead(&in_);
      }
    }
    if (!ok) {
      EndOfInput();
      return;
    }
    v1::ComputeStreamRequest msg;
    absl::Status s = ParseRequest(raw, &msg);
    raw.Clear();
    if (s.ok()) s = Handle(msg);
    if (!s.ok()) FinishOnce(s);
  }

  // One message that parsed: the header, or a chunk after it.
  absl::Status Handle(v1::ComputeStreamRequest& msg) {
    if (msg.has_header()) return Header(msg.release_header());
    if (!msg.has_chunk())
      return absl::InvalidArgumentError("a message with neither header nor chunk");
    if (job_ == nullptr) {
      return absl::InvalidArgumentError("a chunk came before the header; send the header first");
    }
    call_.received += static_cast<int64_t>(msg.chunk().data().size());
    return job_->AcceptChunk(msg.chunk().tensor(), msg.chunk().offset(), msg.chunk().data());
  }

  absl::Status Header(v1::ComputeRequest* header) {
    header_.reset(header);
    if (job_ != nullptr) return absl::InvalidArgumentError("a second header in one stream");
    call_.set_op(OpLabel(*header_));
    if (!header_->output_region().empty()) {
      return absl::InvalidArgumentError(
          "output_region is for Compute: a request whose output goes into a region needs no "
          "stream (put large inputs in regions too)");
    }
    for (const v1::Tensor& t : header_->inputs()) call_.received += t.data().size();
    auto spec = DecodeCompute(*header_, /*allow_streamed=*/true, env_.options);
    if (!spec.ok()) return spec.status();
    spec_ = std::make_unique<ComputeSpec>(*std::move(spec));
    call_.inference = true;
    auto job = ComputeJob::Prepare(*spec_, owner_, env_, deadline_, true, session_);
    if (!job.ok()) return job.status();
    job_ = *std::move(job);
    job_->TimeInto(&call_.stages);
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
    auto out = job_->AllocateOutput(deadline_);
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
    // The plan's bytes: an empty output's storage is one byte long, and sends none.
    const int64_t bytes = job_->plan().out_storage_bytes;
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
          call_.sent += len;
          return job_->device().Read(job_->lane(), *out_, at, data->data(), len);
        });
  }

  grpc::ByteBuffer in_;
  std::mutex order_mu_;
  std::unique_ptr<v1::ComputeRequest> header_;
  // The header as the pipeline takes it; the job's inline inputs point into both.
  std::unique_ptr<ComputeSpec> spec_;
  std::shared_ptr<ComputeJob> job_;
  runtime::StoragePtr out_;
};

}  // namespace

StreamBase* TensorServiceImpl::ComputeStreamBytes(grpc::CallbackServerContext* ctx) {
  return new ComputeStreamReactor(ctx, env_);
}

}  // namespace tc::server
