// DataChunk messages on the wire without protobuf copies of their bytes.
//
// ComputeStreamRequest, TensorStreamMessage and UploadRequest all carry a chunk as field 2:
// DataChunk {int32 tensor = 1; int64 offset = 2; bytes data = 3}. A chunk written here is a
// few bytes of framing followed by a slice that points into the caller's memory; a chunk read
// here stays in the slices gRPC received it in until the reader copies it to where it goes.
// Any other message (a header) is left to protobuf.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace tc::wire {

// A chunk message over [data, data + n). The bytes are not copied: they must stay valid and
// unchanged until the call that sends the message has finished.
grpc::ByteBuffer ChunkMessage(int32_t tensor, int64_t offset, const void* data, size_t n);
// A chunk message over `data`, which the message keeps a reference to.
grpc::ByteBuffer ChunkMessage(int32_t tensor, int64_t offset, grpc::Slice data);

// A ComputeResponse whose output is the Tensor `meta` (serialized, without data) with `data`
// as its bytes: what protobuf writes for that message (field 1, then Tensor.data, field 5,
// after the lower-numbered fields meta holds; meta must hold none numbered above 5), with the
// data referenced, not copied. The data must stay valid until the message has been sent.
grpc::ByteBuffer ComputeResponseMessage(const std::string& meta, grpc::Slice data);

// A received chunk: where its bytes belong, and the slices they are in.
class ChunkRef {
 public:
  int32_t tensor() const { return tensor_; }
  int64_t offset() const { return offset_; }
  int64_t size() const { return size_; }
  // Copies the chunk's bytes to `dst` (size() bytes).
  void CopyTo(void* dst) const;
  // Calls fn(pointer, length) for each contiguous piece, in order.
  template <class Fn>
  void ForEachPiece(Fn&& fn) const {
    size_t skip = first_;
    int64_t left = size_;
    for (const grpc::Slice& s : slices_) {
      if (left == 0) break;
      if (skip >= s.size()) {
        skip -= s.size();
        continue;
      }
      const size_t n = std::min<size_t>(s.size() - skip, static_cast<size_t>(left));
      fn(s.begin() + skip, n);
      left -= static_cast<int64_t>(n);
      skip = 0;
    }
  }

 private:
  friend bool ParseChunk(const grpc::ByteBuffer& buffer, ChunkRef* out);
  int32_t tensor_ = 0;
  int64_t offset_ = 0;
  int64_t size_ = 0;
  size_t first_ = 0;  // Where the bytes start in the concatenated slices.
  std::vector<grpc::Slice> slices_;
};

// True when `buffer` is a message whose only field is a chunk (field 2) laid out as protobuf
// writes it: its fields in order, each at most once, nothing unknown. False for anything
// else (a header, or a chunk in some other valid encoding): parse those with protobuf.
bool ParseChunk(const grpc::ByteBuffer& buffer, ChunkRef* out);

}  // namespace tc::wire
