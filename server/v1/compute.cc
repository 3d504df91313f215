// Compute: one request and its result in one message each (or a resident result).
#include <optional>
#include <string>

#include "server/calls/call.h"
#include "server/v1/codec.h"
#include "server/pipeline/parse.h"
#include "server/pipeline/run.h"
#include "server/v1/decode.h"
#include "server/v1/service.h"

namespace tc::server {

grpc::ServerUnaryReactor* TensorServiceImpl::Compute(grpc::CallbackServerContext* ctx,
                                                     const grpc::ByteBuffer* raw,
                                                     grpc::ByteBuffer* response) {
  auto request = std::make_shared<v1::ComputeRequest>();
  // Large inline inputs go from gRPC's slices into the server's reused buffers.
  auto outside = std::make_shared<OutsideData>();
  const absl::Status parsed =
      ParseComputeRequest(*raw, request.get(), env_.host_buffers, outside.get());
  auto* reactor = new CountedUnaryReactor(env_.life);
  // The request and the buffers outside it (which inline inputs point into), its spec and the
  // reply live until the call finishes; the response's bytes are the reply's, its output data
  // not copied.
  auto held = std::make_shared<std::optional<ComputeSpec>>();
  auto reply = std::make_shared<ComputeResult>(ComputeResult::Bytes::kBuffer, env_.host_buffers);
  auto call = std::make_shared<Call>(
      &env_, "Compute", parsed.ok() ? OpLabel(*request) : "",
      [reactor, request, outside, held, reply, response](const absl::Status& s) {
        if (s.ok()) *response = EncodeComputeResponse(*reply);
        reactor->Finish(ToGrpcStatus(s));
      });
  if (!call->Admit(*reactor)) return reactor;
  if (!parsed.ok()) {
    call->Finish(parsed);
    return reactor;
  }
  // Where tokens are required, nothing of the request is looked at without one.
  std::optional<std::string> identity;
  if (env_.auth->requires_token()) {
    auto id = env_.auth->Identify(*ctx);
    if (!id.ok()) {
      call->Finish(id.status());
      return reactor;
    }
    identity = *std::move(id);
  }
  auto spec = DecodeCompute(*request, /*allow_streamed=*/false, env_.options, outside.get());
  if (!spec.ok()) {
    // What arrived counts, whatever it asked for.
    for (const v1::Tensor& t : request->inputs()) call->received += t.data().size();
    for (absl::string_view b : outside->bytes) call->received += b.size();
    call->Finish(spec.status());
    return reactor;
  }
  ComputeSpec* decoded = &held->emplace(*std::move(spec));
  decoded->identity = std::move(identity);
  StartCompute(env_, ctx, decoded, reply.get(), std::move(call));
  return reactor;
}

}  // namespace tc::server
