// Resident transfers: Upload, Download and Release.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "proto/chunk_wire.h"
#include "server/calls/reactor.h"
#include "server/calls/call.h"
#include "server/v1/codec.h"
#include "server/pipeline/parse.h"
#include "server/v1/service.h"
#include "runtime/device.h"
#include "server/data/resident.h"
#include "server/pipeline/host_buffers.h"

namespace tc::server {
namespace {

// A header (a new tensor, or a part of an existing one's storage), then chunks in order. Raw
// messages: a chunk goes from the slices gRPC received it in to the device (chunk_wire.h);
// anything else is parsed with protobuf.
class UploadReactor final : public PooledReactor<grpc::ServerReadReactor<grpc::ByteBuffer>> {
 public:
  UploadReactor(grpc::CallbackServerContext* ctx, const ServiceEnv& env, grpc::ByteBuffer* response)
      : PooledReactor(ctx, env, "Upload"), raw_response_(response) {
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
    grpc::ByteBuffer raw;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;
      if (ok) {
        raw.Swap(&in_);
        StartRead(&in_);
      }
    }
    absl::Status s;
    wire::ChunkRef chunk;
    if (!ok) {
      s = EndOfInput();
    } else if (wire::ParseChunk(raw, &chunk)) {
      std::vector<runtime::Device::HostPiece> pieces;
      chunk.ForEachPiece([&pieces](const uint8_t* p, size_t n) {
        pieces.push_back({p, static_cast<int64_t>(n)});
      });
      s = Chunk(chunk.offset(), pieces);
    } else {
      v1::UploadRequest msg;
      s = ParseRequest(raw, &msg);
      if (!s.ok()) {
      } else if (msg.has_header()) {
        s = Header(msg.header());
      } else if (msg.has_chunk()) {
        const std::string& d = msg.chunk().data();
        s = Chunk(msg.chunk().offset(), {{d.data(), static_cast<int64_t>(d.size())}});
      } else {
        s = absl::InvalidArgumentError("a message with neither header nor chunk");
      }
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
        return absl::InvalidArgumentError(absl::StrCat(
            "offset ", h.offset(), " is outside the tensor's ", (*r)->storage->bytes(), " bytes"));
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
    view_.storage_bytes =
        t.data().empty() ? t.storage_bytes() : static_cast<int64_t>(t.data().size());
    if (auto s = ValidateView(view_, "tensor"); !s.ok()) return s;
    if (view_.storage_bytes > env_.options.max_request_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("tensor of ", view_.storage_bytes,
                                                       " bytes exceeds this server's limit of ",
                                                       env_.options.max_request_bytes, " bytes"));
    }
    if (auto s = env_.resident->CheckQuota(owner_, view_.storage_bytes); !s.ok()) return s;
    ttl_ = h.ttl_seconds();
    auto placed =
        PlaceResident(*env_.devices, *env_.resident, owner_, session_, view_.storage_bytes,
                      h.has_device() ? std::optional<int>(h.device()) : std::nullopt);
    if (!placed.ok()) return placed.status();
    runtime::Device& d = **placed;
    // Zeroed: a tensor whose parts are still to come must not show old memory.
    auto storage = d.Allocate(view_.storage_bytes, true, deadline_);
    if (!storage.ok()) return storage.status();
    storage_ = *std::move(storage);
    lane_ = d.AcquireLane();
    if (!t.data().empty()) {
      if (view_.dtype == DType::kBool) {
        if (auto s = CheckBoolBytes(t.data().data(), view_.storage_bytes, "tensor"); !s.ok()) {
          return s;
        }
      }
      call_.received += view_.storage_bytes;
      got_ = view_.storage_bytes;
      return d.Write(*lane_, *storage_, 0, t.data().data(), view_.storage_bytes);
    }
    return absl::OkStatus();
  }

  // A chunk's bytes, at storage byte `offset`, in pieces.
  absl::Status Chunk(int64_t offset, const std::vector<runtime::Device::HostPiece>& pieces) {
    if (storage_ == nullptr) {
      return absl::InvalidArgumentError("a chunk came before the header; send the header first");
    }
    if (offset != start_ + got_) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk at byte ", offset, " but the next expected byte is ", start_ + got_,
                       "; send chunks in order, without gaps"));
    }
    int64_t len = 0;
    for (const auto& p : pieces) len += p.bytes;
    if (len > storage_->bytes() - offset) {
      return absl::InvalidArgumentError(absl::StrCat("chunk of ", len, " bytes at byte ", offset,
                                                     " overruns the tensor's ", storage_->bytes(),
                                                     " bytes"));
    }
    const DType dtype = part_of_ != nullptr ? part_of_->view.dtype : view_.dtype;
    if (dtype == DType::kBool) {
      int64_t at = offset;
      for (const auto& p : pieces) {
        if (auto s = CheckBoolBytes(p.data, p.bytes, "tensor", at); !s.ok()) return s;
        at += p.bytes;
      }
    }
    call_.received += len;
    got_ += len;
    return storage_->device().WritePieces(*lane_, *storage_, offset, pieces);
  }

  absl::Status EndOfInput() {
    if (storage_ == nullptr)
      return absl::InvalidArgumentError("the stream ended before its header");
    // Every byte on the device before anyone can use the tensor.
    if (auto s = storage_->device().Sync(*lane_); !s.ok()) return s;
    response_.set_bytes_received(got_);
    if (part_of_ != nullptr) {
      // Done writing: readable as soon as the client hears so.
      part_of_->writers.fetch_sub(1);
      writing_ = false;
      SetTensorMeta(part_of_->view, response_.mutable_tensor());
      response_.mutable_tensor()->set_handle(part_of_->handle);
      response_.set_expires_unix_seconds(absl::ToUnixSeconds(part_of_->expires));
      response_.set_device(storage_->device().info().index);
      return Respond();
    }
    // Whole, or only reserved (its parts to come on other streams).
    if (got_ != 0 && got_ != view_.storage_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("the stream ended after ", got_, " of ", view_.storage_bytes, " bytes"));
    }
    auto r = env_.resident->Add(owner_, storage_, view_, ttl_);
    if (!r.ok()) return r.status();
    SetTensorMeta((*r)->view, response_.mutable_tensor());
    response_.mutable_tensor()->set_handle((*r)->handle);
    response_.set_expires_unix_seconds(absl::ToUnixSeconds((*r)->expires));
    response_.set_device(storage_->device().info().index);
    return Respond();
  }

  // The response, serialized where gRPC sends it from.
  absl::Status Respond() {
    bool own = false;
    if (!grpc::SerializationTraits<v1::UploadResponse>::Serialize(response_, raw_response_, &own)
             .ok()) {
      return absl::InternalError("cannot serialize the response");
    }
    return absl::OkStatus();
  }

  grpc::ByteBuffer* raw_response_;
  v1::UploadResponse response_;
  grpc::ByteBuffer in_;
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

// The header, then the range's bytes in chunks: each read from the device straight into the
// slice that the message sends (chunk_wire.h), not into a protobuf string copied again.
class DownloadReactor final : public PooledReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>> {
 public:
  DownloadReactor(grpc::CallbackServerContext* ctx, const ServiceEnv& env,
                  const grpc::ByteBuffer* request)
      : PooledReactor(ctx, env, "Download") {
    if (Authorized()) Post([this, request] { Begin(*request); });
  }
  void OnWriteDone(bool ok) override { WriteDone<grpc::ByteBuffer>(ok); }

 private:
  void Begin(const grpc::ByteBuffer& raw) {
    grpc::ByteBuffer copy(raw);
    v1::DownloadRequest request;
    if (auto s = ParseRequest(copy, &request); !s.ok()) {
      FinishOnce(s);
      return;
    }
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
    if (absl::Status h = tensor_->storage->usable(); !h.ok()) {
      FinishOnce(h);
      return;
    }
    const int64_t size = tensor_->storage->bytes();
    const int64_t begin = request.offset();
    const int64_t length = request.length() == 0 ? size - begin : request.length();
    if (begin < 0 || length < 0 || begin > size || length > size - begin) {
      FinishOnce(absl::OutOfRangeError(absl::StrCat("range [", begin, ", +", length,
                                                    ") is outside the tensor's ", size, " bytes")));
      return;
    }
    // A chunk and its framing must fit in one message.
    const int64_t max_message = env_.options.max_message_bytes;
    const int64_t max_chunk = std::max(max_message - 1024, max_message / 2);
    const int64_t chunk = request.chunk_bytes() > 0 ? std::min(request.chunk_bytes(), max_chunk)
                                                    : env_.options.chunk_bytes;
    lane_ = tensor_->storage->device().AcquireLane();
    const int64_t chunks = (length + chunk - 1) / chunk;
    StartSending<grpc::ByteBuffer>(1 + chunks, [this, begin, length, chunk](int64_t k,
                                                                            grpc::ByteBuffer* m) {
      if (k == 0) {
        v1::TensorStreamMessage h;
        SetTensorMeta(tensor_->view, h.mutable_header());
        h.mutable_header()->set_handle(tensor_->handle);
        bool own = false;
        if (!grpc::SerializationTraits<v1::TensorStreamMessage>::Serialize(h, m, &own).ok()) {
          return absl::InternalError("cannot serialize the header");
        }
        return absl::OkStatus();
      }
      const int64_t at = (k - 1) * chunk;
      const int64_t len = std::min(chunk, length - at);
      call_.sent += len;
      runtime::Device& device = tensor_->storage->device();
      // Large chunks are read into one of the server's reused buffers (pinned where the
      // device takes that: no staging, no fresh pages) and sent from it.
      HostBuffers::Lease lease;
      if (env_.host_buffers != nullptr && len >= kPooledChunkBytes) {
        lease = env_.host_buffers->Acquire(len);
      }
      const bool direct = lease != nullptr && lease->pinned() && device.Reaches(lease->data(), len);
      grpc::Slice data = lease != nullptr ? LeasedSlice(std::move(lease), static_cast<size_t>(len))
                                          : grpc::Slice(static_cast<size_t>(len));
      auto* dst = const_cast<uint8_t*>(data.begin());
      auto s = direct ? device.ReadPinned(*lane_, *tensor_->storage, begin + at, dst, len)
                      : device.Read(*lane_, *tensor_->storage, begin + at, dst, len);
      if (!s.ok()) return s;
      *m = wire::ChunkMessage(0, begin + at, std::move(data));
      return absl::OkStatus();
    });
  }

  // Chunks from this size on are sent from the server's reused host buffers.
  static constexpr int64_t kPooledChunkBytes = int64_t{256} << 10;

  std::shared_ptr<ResidentTensor> tensor_;
  std::unique_ptr<runtime::Lane> lane_;
};

}  // namespace

grpc::ServerReadReactor<grpc::ByteBuffer>* TensorServiceImpl::Upload(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) {
  return new UploadReactor(ctx, env_, response);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* TensorServiceImpl::Download(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) {
  return new DownloadReactor(ctx, env_, request);
}

grpc::ServerUnaryReactor* TensorServiceImpl::Release(grpc::CallbackServerContext* ctx,
                                                     const v1::ReleaseRequest* request,
                                                     v1::ReleaseResponse* response) {
  Call call{&env_, ctx->DefaultReactor(), "Release", ""};
  auto id = call.AdmitCaller(*ctx);
  if (!id) return call.reactor;
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

}  // namespace tc::server
