// Request messages parsed by the server itself rather than by gRPC, which answers a message
// that does not parse with UNIMPLEMENTED and no message (a proto3 string field holding bytes
// that are not UTF-8 is enough): here the caller learns what is wrong and where.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace tc::server {

// Parses `buffer` into `m`. INVALID_ARGUMENT when it does not parse: naming the string field
// whose bytes are not UTF-8 ("field 'header.input_names[1]' of the ComputeStreamRequest is not
// UTF-8: byte 0xff at 3"), or saying the bytes are not a `what` message.
absl::Status ParseRequest(const grpc::ByteBuffer& buffer, google::protobuf::Message* m);

// Where `bytes` (a serialized message of `m`'s type) has a string field that is not UTF-8:
// its path and what is wrong; empty when there is none.
std::string FindInvalidUtf8(const google::protobuf::Descriptor* type, absl::string_view bytes);

}  // namespace tc::server
