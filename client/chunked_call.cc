#include "client/chunked_call.h"

#include <condition_variable>
#include <mutex>

namespace tc::client {
namespace {

class ChunkedCall final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  ChunkedCall(grpc::ClientContext& ctx, const NextMessage& next, const OnMessage& on_message)
      : ctx_(ctx), next_(next), on_message_(on_message) {}

  void Begin() {
    StartRead(&in_);
    WriteNext();
    StartCall();
  }

  absl::Status Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    if (!handler_error_.ok()) return handler_error_;
    return absl::Status(static_cast<absl::StatusCode>(status_.error_code()),
                        status_.error_message());
  }

  void OnWriteDone(bool ok) override {
    if (ok) WriteNext();
    // Not ok: the call is over; OnDone says how.
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    absl::Status s = on_message_(in_);
    if (!s.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (handler_error_.ok()) handler_error_ = s;
      }
      ctx_.TryCancel();
      return;
    }
    StartRead(&in_);
  }

  void OnDone(const grpc::Status& s) override {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = s;
    done_ = true;
    cv_.notify_all();
  }

 private:
  void WriteNext() {
    out_.Clear();
    if (next_(&out_)) {
      StartWrite(&out_);
    } else {
      StartWritesDone();
    }
  }

  grpc::ClientContext& ctx_;
  const NextMessage& next_;
  const OnMessage& on_message_;
  grpc::ByteBuffer out_;
  grpc::ByteBuffer in_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  grpc::Status status_;
  absl::Status handler_error_;
};

}  // namespace

absl::Status RunChunkedCall(grpc::GenericStub& stub, grpc::ClientContext& ctx,
                            const std::string& method, const NextMessage& next,
                            const OnMessage& on_message) {
  ChunkedCall call(ctx, next, on_message);
  stub.PrepareBidiStreamingCall(&ctx, method, grpc::StubOptions(), &call);
  call.Begin();
  return call.Wait();
}

}  // namespace tc::client
