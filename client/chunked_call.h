// One streaming call driven from the caller's memory: outgoing messages are produced one at a
// time (chunks as slices of the caller's buffers, see proto/chunk_wire.h), incoming ones are
// handed over as gRPC received them, and the caller waits for the status.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace tc::client {

// Fills the next message to send; false when there is none left.
using NextMessage = std::function<bool(grpc::ByteBuffer*)>;
// Takes one received message; an error cancels the call and becomes its result.
using OnMessage = std::function<absl::Status(grpc::ByteBuffer&)>;

// Runs `method` ("/package.Service/Method") on `stub` as a bidirectional stream (which any
// streaming or unary method accepts on the wire): sends what `next` gives, half-closes,
// passes every reply to `on_message`, and returns the first error (the handler's, or the
// call's status).
absl::Status RunChunkedCall(grpc::GenericStub& stub, grpc::ClientContext& ctx,
                            const std::string& method, const NextMessage& next,
                            const OnMessage& on_message);

}  // namespace tc::client
