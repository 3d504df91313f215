#include "proto/chunk_wire.h"

#include <algorithm>
#include <cstring>

namespace tc::wire {
namespace {

constexpr uint8_t kChunkTag = (2 << 3) | 2;   // Field 2, length-delimited.
constexpr uint8_t kTensorTag = (1 << 3) | 0;  // DataChunk.tensor, varint.
constexpr uint8_t kOffsetTag = (2 << 3) | 0;  // DataChunk.offset, varint.
constexpr uint8_t kDataTag = (3 << 3) | 2;    // DataChunk.data, length-delimited.

size_t PutVarint(uint8_t* p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  p[n++] = static_cast<uint8_t>(v);
  return n;
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Reads bytes across the received slices.
class Reader {
 public:
  explicit Reader(const std::vector<grpc::Slice>& slices) : slices_(slices) { Normalize(); }

  size_t position() const { return pos_; }
  bool Byte(uint8_t* b) {
    if (i_ >= slices_.size()) return false;
    *b = slices_[i_].begin()[at_];
    ++pos_;
    ++at_;
    Normalize();
    return true;
  }
  // A varint of at most `max_bytes` bytes (protobuf reads tags and lengths in at most 5).
  bool Varint(uint64_t* v, int max_bytes = 10) {
    *v = 0;
    for (int shift = 0; shift < 7 * max_bytes && shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // Appends the next n bytes to `out` and moves past them; false if fewer are left.
  bool Copy(uint64_t n, std::string* out) {
    while (n > 0 && i_ < slices_.size()) {
      const uint64_t step = std::min<uint64_t>(slices_[i_].size() - at_, n);
      out->append(reinterpret_cast<const char*>(slices_[i_].begin() + at_),
                  static_cast<size_t>(step));
      at_ += step;
      pos_ += step;
      n -= step;
      Normalize();
    }
    return n == 0;
  }
  // Moves past n bytes; false if fewer are left.
  bool Skip(uint64_t n) {
    while (n > 0 && i_ < slices_.size()) {
      const uint64_t step = std::min<uint64_t>(slices_[i_].size() - at_, n);
      at_ += step;
      pos_ += step;
      n -= step;
      Normalize();
    }
    return n == 0;
  }

 private:
  // At a byte, or past the last slice.
  void Normalize() {
    while (i_ < slices_.size() && at_ >= slices_[i_].size()) {
      ++i_;
      at_ = 0;
    }
  }
  const std::vector<grpc::Slice>& slices_;
  size_t i_ = 0;
  size_t at_ = 0;
  size_t pos_ = 0;
};

}  // namespace

namespace {

// The framing before a chunk's n data bytes; returns its length.
size_t ChunkHead(int32_t tensor, int64_t offset, size_t n, uint8_t head[48]) {
  // Outer tag and length, then DataChunk's fields (zero values are not written, as protobuf
  // does not write them), the data's tag and length; then the data itself.
  uint8_t inner[32];
  size_t k = 0;
  if (tensor != 0) {
    inner[k++] = kTensorTag;
    k += PutVarint(inner + k, static_cast<uint64_t>(static_cast<int64_t>(tensor)));
  }
  if (offset != 0) {
    inner[k++] = kOffsetTag;
    k += PutVarint(inner + k, static_cast<uint64_t>(offset));
  }
  const size_t data_field = n == 0 ? 0 : 1 + VarintSize(n) + n;
  size_t h = 0;
  head[h++] = kChunkTag;
  h += PutVarint(head + h, k + data_field);
  std::memcpy(head + h, inner, k);
  h += k;
  if (n > 0) {
    head[h++] = kDataTag;
    h += PutVarint(head + h, n);
  }
  return h;
}

}  // namespace

grpc::Slice LentBytes::Lend(const void* data, size_t n) {
  if (n == 0) return grpc::Slice();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++lent_;
  }
  return grpc::Slice(const_cast<void*>(data), n, &LentBytes::Returned, this);
}

void LentBytes::Returned(void* self) {
  auto* lender = static_cast<LentBytes*>(self);
  std::lock_guard<std::mutex> lock(lender->mu_);
  if (--lender->lent_ == 0) lender->returned_.notify_all();
}

void LentBytes::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  returned_.wait(lock, [this] { return lent_ == 0; });
}

grpc::ByteBuffer ChunkMessage(int32_t tensor, int64_t offset, grpc::Slice data) {
  uint8_t head[48];
  const size_t h = ChunkHead(tensor, offset, data.size(), head);
  if (data.size() == 0) {
    grpc::Slice only(head, h);
    return grpc::ByteBuffer(&only, 1);
  }
  grpc::Slice slices[2] = {grpc::Slice(head, h), std::move(data)};
  return grpc::ByteBuffer(slices, 2);
}

grpc::ByteBuffer ComputeResponseMessage(const std::string& meta, grpc::Slice data) {
  constexpr uint8_t kOutputTag = (1 << 3) | 2;      // ComputeResponse.output
  constexpr uint8_t kTensorDataTag = (5 << 3) | 2;  // Tensor.data
  const size_t n = data.size();
  // Protobuf leaves an empty bytes field out.
  const size_t data_field = n == 0 ? 0 : 1 + VarintSize(n) + n;
  std::string head;
  head.resize(1 + 10 + meta.size() + 1 + 10);
  auto* p = reinterpret_cast<uint8_t*>(head.data());
  size_t h = 0;
  p[h++] = kOutputTag;
  h += PutVarint(p + h, meta.size() + data_field);
  std::memcpy(p + h, meta.data(), meta.size());
  h += meta.size();
  if (n > 0) {
    p[h++] = kTensorDataTag;
    h += PutVarint(p + h, n);
  }
  head.resize(h);
  grpc::Slice first(head);
  if (n == 0) return grpc::ByteBuffer(&first, 1);
  grpc::Slice slices[2] = {std::move(first), std::move(data)};
  return grpc::ByteBuffer(slices, 2);
}

grpc::ByteBuffer InferResponseMessage(const std::string& meta, grpc::Slice data) {
  constexpr uint8_t kRawOutputTag = (6 << 3) | 2;  // ModelInferResponse.raw_output_contents
  std::string head = meta;
  head.push_back(static_cast<char>(kRawOutputTag));
  uint8_t len[10];
  head.append(reinterpret_cast<const char*>(len), PutVarint(len, data.size()));
  grpc::Slice first(head);
  // (A repeated bytes entry is written even when empty.)
  if (data.size() == 0) return grpc::ByteBuffer(&first, 1);
  grpc::Slice slices[2] = {std::move(first), std::move(data)};
  return grpc::ByteBuffer(slices, 2);
}

bool ParseChunk(const grpc::ByteBuffer& buffer, ChunkRef* out) {
  out->slices_.clear();
  if (!buffer.Dump(&out->slices_).ok()) return false;
  const size_t total = buffer.Length();
  Reader r(out->slices_);
  uint8_t tag;
  uint64_t len;
  if (!r.Byte(&tag) || tag != kChunkTag || !r.Varint(&len)) return false;
  if (len != total - r.position()) return false;  // Nothing after the chunk.
  out->tensor_ = 0;
  out->offset_ = 0;
  out->size_ = 0;
  out->first_ = r.position();
  int last = 0;  // Fields must come in order, each once.
  while (r.position() < total) {
    if (!r.Byte(&tag)) return false;
    uint64_t v;
    if (tag == kTensorTag && last < 1) {
      if (!r.Varint(&v)) return false;
      // int32 is written sign-extended to 64 bits.
      const auto s = static_cast<int64_t>(v);
      if (s < INT32_MIN || s > INT32_MAX) return false;
      out->tensor_ = static_cast<int32_t>(s);
      last = 1;
    } else if (tag == kOffsetTag && last < 2) {
      if (!r.Varint(&v)) return false;
      out->offset_ = static_cast<int64_t>(v);
      last = 2;
    } else if (tag == kDataTag && last < 3) {
      if (!r.Varint(&v) || v != total - r.position()) return false;
      out->first_ = r.position();
      out->size_ = static_cast<int64_t>(v);
      return r.Skip(v);
    } else {
      return false;
    }
  }
  out->first_ = total;
  return true;  // A chunk without data.
}

namespace {

constexpr int kWireVarint = 0, kWireFixed64 = 1, kWireLength = 2, kWireFixed32 = 5;

void AppendVarint(uint64_t v, std::string* out) {
  uint8_t b[10];
  out->append(reinterpret_cast<const char*>(b), PutVarint(b, v));
}

// Copies one field (its tag already read and written to `out`) of wire type `type` from `r`,
// ending no later than `end`. False where it is malformed or a group.
bool CopyField(Reader& r, int type, size_t end, std::string* out) {
  uint64_t v = 0;
  switch (type) {
    case kWireVarint:
      if (!r.Varint(&v)) return false;
      AppendVarint(v, out);
      break;
    case kWireFixed64:
      if (!r.Copy(8, out)) return false;
      break;
    case kWireFixed32:
      if (!r.Copy(4, out)) return false;
      break;
    case kWireLength:
      if (!r.Varint(&v, 5) || v > INT32_MAX || v > end - std::min(end, r.position())) return false;
      AppendVarint(v, out);
      if (!r.Copy(v, out)) return false;
      break;
    default:
      return false;  // Groups (3, 4) and the wire types no one defines.
  }
  return r.position() <= end;
}

// A field's tag as protobuf reads it: at most 5 bytes, a field number from 1 to 2^29 - 1.
bool ReadTag(Reader& r, uint64_t* tag) {
  return r.Varint(tag, 5) && *tag <= UINT32_MAX && (*tag >> 3) != 0;
}

}  // namespace

bool SplitMessage::Start(const grpc::ByteBuffer& buffer) {
  rest_.clear();
  taken_.clear();
  slices_.clear();
  return buffer.Dump(&slices_).ok();
}

namespace internal {

// Takes the data (Tensor.data, field 5) of every Tensor in field `tensor_field` of the message
// in `buffer` out where it is at least `min_bytes` long. `once`: the field is a singular one,
// which protobuf merges where it comes more than once: such a message is left to protobuf.
bool SplitTensorData(const grpc::ByteBuffer& buffer, uint64_t tensor_field, bool once,
                     int64_t min_bytes, SplitMessage* out) {
  constexpr uint64_t kDataField = 5;  // Tensor.data
  const uint64_t kInputsField = tensor_field;
  if (!out->Start(buffer)) return false;
  const size_t total = buffer.Length();
  Reader r(out->slices_);
  int input = 0;
  std::string tensor;
  while (r.position() < total) {
    uint64_t tag = 0;
    if (!ReadTag(r, &tag)) return false;
    const int type = static_cast<int>(tag & 7);
    if ((tag >> 3) != kInputsField || type != kWireLength) {
      AppendVarint(tag, &out->rest_);
      if (!CopyField(r, type, total, &out->rest_)) return false;
      continue;
    }
    uint64_t len = 0;
    if (!r.Varint(&len, 5) || len > INT32_MAX || len > total - r.position()) return false;
    const size_t end = r.position() + static_cast<size_t>(len);
    // The tensor's fields, its data taken out where it is large.
    tensor.clear();
    bool has_data = false;
    while (r.position() < end) {
      uint64_t inner = 0;
      if (!ReadTag(r, &inner)) return false;
      const int inner_type = static_cast<int>(inner & 7);
      if ((inner >> 3) == kDataField && inner_type == kWireLength) {
        // A second one would replace the first (protobuf keeps the last): left to protobuf.
        if (has_data) return false;
        has_data = true;
        uint64_t n = 0;
        if (!r.Varint(&n, 5) || n > INT32_MAX || n > end - std::min(end, r.position()))
          return false;
        if (n >= static_cast<uint64_t>(min_bytes) && n > 0) {
          out->taken_.push_back({input, r.position(), static_cast<int64_t>(n)});
          if (!r.Skip(n)) return false;
          continue;
        }
        AppendVarint(inner, &tensor);
        AppendVarint(n, &tensor);
        if (!r.Copy(n, &tensor)) return false;
        continue;
      }
      AppendVarint(inner, &tensor);
      if (!CopyField(r, inner_type, end, &tensor)) return false;
    }
    if (r.position() != end) return false;
    if (once && input > 0) return false;
    AppendVarint(tag, &out->rest_);
    AppendVarint(tensor.size(), &out->rest_);
    out->rest_.append(tensor);
    ++input;
  }
  return true;
}

}  // namespace internal

bool SplitComputeRequest(const grpc::ByteBuffer& buffer, int64_t min_bytes, SplitMessage* out) {
  return internal::SplitTensorData(buffer, 2, false, min_bytes, out);  // ComputeRequest.inputs
}

bool SplitComputeResponse(const grpc::ByteBuffer& buffer, int64_t min_bytes, SplitMessage* out) {
  return internal::SplitTensorData(buffer, 1, true, min_bytes, out);  // ComputeResponse.output
}

grpc::ByteBuffer ComputeRequestMessage(const std::string& head, std::vector<TensorPart> inputs) {
  constexpr uint8_t kInputsTag = (2 << 3) | 2;      // ComputeRequest.inputs
  constexpr uint8_t kTensorDataTag = (5 << 3) | 2;  // Tensor.data
  std::vector<grpc::Slice> slices;
  slices.reserve(2 * inputs.size() + 1);
  std::string framing = head;  // The bytes up to the next data slice.
  for (TensorPart& t : inputs) {
    const size_t n = t.data.size();
    const size_t data_field = n == 0 ? 0 : 1 + VarintSize(n) + n;
    framing.push_back(static_cast<char>(kInputsTag));
    AppendVarint(t.meta.size() + data_field, &framing);
    framing.append(t.meta);
    if (n == 0) continue;
    framing.push_back(static_cast<char>(kTensorDataTag));
    AppendVarint(n, &framing);
    slices.emplace_back(framing);
    framing.clear();
    slices.push_back(std::move(t.data));
  }
  if (!framing.empty() || slices.empty()) slices.emplace_back(framing);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

bool SplitInferRequest(const grpc::ByteBuffer& buffer, int64_t min_bytes, SplitMessage* out) {
  constexpr uint64_t kRawInputField = 7;  // ModelInferRequest.raw_input_contents
  if (!out->Start(buffer)) return false;
  const size_t total = buffer.Length();
  Reader r(out->slices_);
  int entry = 0;
  while (r.position() < total) {
    uint64_t tag = 0;
    if (!ReadTag(r, &tag)) return false;
    const int type = static_cast<int>(tag & 7);
    AppendVarint(tag, &out->rest_);
    if ((tag >> 3) != kRawInputField || type != kWireLength) {
      if (!CopyField(r, type, total, &out->rest_)) return false;
      continue;
    }
    uint64_t n = 0;
    if (!r.Varint(&n, 5) || n > INT32_MAX || n > total - r.position()) return false;
    if (n >= static_cast<uint64_t>(min_bytes) && n > 0) {
      out->taken_.push_back({entry, r.position(), static_cast<int64_t>(n)});
      AppendVarint(0, &out->rest_);
      if (!r.Skip(n)) return false;
    } else {
      AppendVarint(n, &out->rest_);
      if (!r.Copy(n, &out->rest_)) return false;
    }
    ++entry;
  }
  return true;
}

namespace {

void CopyPieces(const std::vector<grpc::Slice>& slices, size_t first, int64_t size, void* dst) {
  auto* d = static_cast<std::byte*>(dst);
  ForEachPieceOf(slices, first, size, [&d](const uint8_t* p, size_t n) {
    std::memcpy(d, p, n);
    d += n;
  });
}

}  // namespace

void SplitMessage::CopyTo(const Taken& t, void* dst) const {
  CopyPieces(slices_, t.first, t.size, dst);
}

void ChunkRef::CopyTo(void* dst) const { CopyPieces(slices_, first_, size_, dst); }

}  // namespace tc::wire
