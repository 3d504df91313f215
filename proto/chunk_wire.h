// DataChunk messages on the wire without protobuf copies of their bytes, and the large inline
// inputs of a ComputeRequest read the same way.
//
// ComputeStreamRequest, TensorStreamMessage and UploadRequest all carry a chunk as field 2:
// DataChunk {int32 tensor = 1; int64 offset = 2; bytes data = 3}. A chunk written here is a
// few bytes of framing followed by a slice that points into the caller's memory; a chunk read
// here stays in the slices gRPC received it in until the reader copies it to where it goes.
// Any other message (a header) is left to protobuf.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace tc::wire {

// Slices over memory their lender owns, for gRPC to send without a copy. gRPC may hold such a
// slice after the call that sent it has ended: a call cancelled, past its deadline or refused
// mid-send leaves its frames on the connection's write queue until they are written or the
// connection closes. The memory stays valid and unchanged until Wait() has returned (the
// destructor waits too), which is when gRPC has let go of every slice lent.
class LentBytes {
 public:
  LentBytes() = default;
  ~LentBytes() { Wait(); }
  LentBytes(const LentBytes&) = delete;
  LentBytes& operator=(const LentBytes&) = delete;

  grpc::Slice Lend(const void* data, size_t n);
  void Wait();

 private:
  static void Returned(void* self);

  std::mutex mu_;
  std::condition_variable returned_;
  int64_t lent_ = 0;
};

// A chunk message over `data`, which the message keeps a reference to.
grpc::ByteBuffer ChunkMessage(int32_t tensor, int64_t offset, grpc::Slice data);

// A ComputeResponse whose output is the Tensor `meta` (serialized, without data) with `data`
// as its bytes: what protobuf writes for that message (field 1, then Tensor.data, field 5,
// after the lower-numbered fields meta holds; meta must hold none numbered above 5), with the
// data referenced, not copied. The data must stay valid until the message has been sent.
grpc::ByteBuffer ComputeResponseMessage(const std::string& meta, grpc::Slice data);

// Calls fn(pointer, length) for each contiguous piece of the `size` bytes that start at byte
// `first` of the concatenated `slices`, in order.
template <class Fn>
void ForEachPieceOf(const std::vector<grpc::Slice>& slices, size_t first, int64_t size, Fn&& fn) {
  size_t skip = first;
  int64_t left = size;
  for (const grpc::Slice& s : slices) {
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
    ForEachPieceOf(slices_, first_, size_, fn);
  }

 private:
  friend bool ParseChunk(const grpc::ByteBuffer& buffer, ChunkRef* out);
  int32_t tensor_ = 0;
  int64_t offset_ = 0;
  int64_t size_ = 0;
  size_t first_ = 0;  // Where the bytes start in the concatenated slices.
  std::vector<grpc::Slice> slices_;
};

class SplitMessage;
namespace internal {
bool SplitTensorData(const grpc::ByteBuffer& buffer, uint64_t tensor_field, bool once,
                     int64_t min_bytes, SplitMessage* out);
}  // namespace internal

// A message as received (a ComputeRequest, a ComputeResponse, a ModelInferRequest), its large
// tensors' bytes (a Tensor's data, a raw_input_contents entry) left in the slices gRPC
// received them in.
class SplitMessage {
 public:
  // One input's bytes taken out of the message.
  struct Taken {
    int input = 0;     // Its index among the request's inputs.
    size_t first = 0;  // Where its bytes start in the concatenated slices.
    int64_t size = 0;
  };
  // The message without the bytes taken out (their tensors hold no data field): for protobuf.
  const std::string& rest() const { return rest_; }
  const std::vector<Taken>& taken() const { return taken_; }
  // Copies one taken input's bytes to `dst` (t.size bytes).
  void CopyTo(const Taken& t, void* dst) const;

 private:
  friend bool internal::SplitTensorData(const grpc::ByteBuffer& buffer, uint64_t tensor_field,
                                        bool once, int64_t min_bytes, SplitMessage* out);
  friend bool SplitInferRequest(const grpc::ByteBuffer& buffer, int64_t min_bytes,
                                SplitMessage* out);
  // Empties this and takes the buffer's slices; false where they cannot be read.
  bool Start(const grpc::ByteBuffer& buffer);
  std::string rest_;
  std::vector<Taken> taken_;
  std::vector<grpc::Slice> slices_;
};

// Takes the data of every input whose data field is at least `min_bytes` long out of the
// ComputeRequest in `buffer`. False where the message is not well-formed protobuf, holds
// groups, or gives one tensor's data more than once: parse those with protobuf (which
// decides what they mean, or what is wrong with them).
bool SplitComputeRequest(const grpc::ByteBuffer& buffer, int64_t min_bytes, SplitMessage* out);

// The same for a ComputeResponse: its output's data (field 1, then 5), Taken::input 0. False
// also where the output comes more than once (protobuf merges those).
bool SplitComputeResponse(const grpc::ByteBuffer& buffer, int64_t min_bytes, SplitMessage* out);

// A ComputeRequest: `head` (serialized: every field but inputs) followed by one inputs entry
// per element of `inputs`, each its `meta` (a Tensor serialized without data) and then its
// data (Tensor.data, field 5) over the slice, referenced, not copied: the bytes must stay
// valid and unchanged until the message has been sent. Fields out of protobuf's own order
// are still the same message to every parser.
struct TensorPart {
  std::string meta;
  grpc::Slice data;
};
grpc::ByteBuffer ComputeRequestMessage(const std::string& head, std::vector<TensorPart> inputs);

// The same for KServe v2's ModelInferRequest: every raw_input_contents entry (field 7) at least
// `min_bytes` long is taken out, Taken::input its index among those entries, and left in
// rest() as an empty entry (so that the others keep their indices). False where the message
// is not well-formed protobuf or holds groups.
bool SplitInferRequest(const grpc::ByteBuffer& buffer, int64_t min_bytes, SplitMessage* out);

// A ModelInferResponse: `meta` (serialized, holding no field numbered above 5: no
// raw_output_contents) followed by one raw_output_contents entry (field 6) over `data`, as
// protobuf writes that message, the data referenced, not copied. It must stay valid until
// the message has been sent.
grpc::ByteBuffer InferResponseMessage(const std::string& meta, grpc::Slice data);

// True when `buffer` is a message whose only field is a chunk (field 2) laid out as protobuf
// writes it: its fields in order, each at most once, nothing unknown. False for anything
// else (a header, or a chunk in some other valid encoding): parse those with protobuf.
bool ParseChunk(const grpc::ByteBuffer& buffer, ChunkRef* out);

}  // namespace tc::wire
