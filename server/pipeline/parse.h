// Request messages parsed by the server itself rather than by gRPC, which answers a message
// that does not parse with UNIMPLEMENTED and no message (a proto3 string field holding bytes
// that are not UTF-8 is enough): here the caller learns what is wrong and where.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "proto/chunk_wire.h"
#include "server/pipeline/host_buffers.h"

namespace tc::server {

// Parses `buffer` into `m`. INVALID_ARGUMENT when it does not parse: naming the string field
// whose bytes are not UTF-8 ("field 'header.input_names[1]' of the ComputeStreamRequest is not
// UTF-8: byte 0xff at 3"), or saying the bytes are not a `what` message.
absl::Status ParseRequest(const grpc::ByteBuffer& buffer, google::protobuf::Message* m);

// Inline inputs' bytes that a parse took out of the message: by index (v1: the input's; KServe
// v2: the raw_input_contents entry's), their place (a null view where the message holds
// them) and whether it is pinned; the buffers they lie in, lent until this goes.
struct OutsideData {
  std::vector<absl::string_view> bytes;
  std::vector<bool> pinned;
  std::vector<HostBuffers::Lease> buffers;
  // The bytes taken out for index i; a null view where the message holds them.
  absl::string_view At(int i) const {
    return i >= 0 && static_cast<size_t>(i) < bytes.size() ? bytes[static_cast<size_t>(i)]
                                                           : absl::string_view();
  }
};

// Inputs' bytes fields at least this long go outside the message.
inline constexpr int64_t kOutsideBytes = int64_t{1} << 20;

// Finds the large inputs' bytes in a request message's wire form (wire::SplitComputeRequest,
// wire::SplitInferRequest).
using Splitter = bool (*)(const grpc::ByteBuffer&, int64_t, wire::SplitMessage*);

// ParseRequest, except that with `buffers`, the bytes fields `split` finds of at least
// kOutsideBytes go from gRPC's slices straight into buffers of the pool (one copy; pinned
// ones the devices read without staging), into `outside`, their fields in `m` left empty.
absl::Status ParseWithOutside(const grpc::ByteBuffer& buffer, google::protobuf::Message* m,
                              Splitter split, HostBuffers* buffers, OutsideData* outside);

// Where `bytes` (a serialized message of `m`'s type) has a string field that is not UTF-8:
// its path and what is wrong; empty when there is none.
std::string FindInvalidUtf8(const google::protobuf::Descriptor* type, absl::string_view bytes);

}  // namespace tc::server
