#include "server/pipeline/parse.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace tc::server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;

// The offset of the first byte of `s` that does not belong to well-formed UTF-8 (RFC 3629:
// no overlong forms, no surrogates, nothing past U+10FFFF), or -1.
int64_t BadUtf8At(absl::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const int64_t n = static_cast<int64_t>(s.size());
  for (int64_t i = 0; i < n;) {
    const unsigned c = p[i];
    int len = 0;
    unsigned lo = 0x80, hi = 0xbf;  // the range of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (int k = 1; k < len; ++k) {
      const unsigned b = p[i + k];
      if (b < (k == 1 ? lo : 0x80u) || b > (k == 1 ? hi : 0xbfu)) return i;
    }
    i += len;
  }
  return -1;
}

// Walks one message's fields; true (with `out` set) at the first string that is not UTF-8.
bool Walk(const Descriptor* type, google::protobuf::io::CodedInputStream* in,
          const std::string& path, std::string* out, int depth) {
  if (depth > 32) return false;
  std::vector<int> seen(static_cast<size_t>(type->field_count()), 0);
  for (uint32_t tag = in->ReadTag(); tag != 0; tag = in->ReadTag()) {
    const FieldDescriptor* f = type->FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    if (f == nullptr ||
        WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED ||
        (f->type() != FieldDescriptor::TYPE_STRING && f->type() != FieldDescriptor::TYPE_MESSAGE)) {
      if (!WireFormatLite::SkipField(in, tag)) return false;
      continue;
    }
    std::string name = path.empty() ? f->name() : absl::StrCat(path, ".", f->name());
    if (f->is_repeated()) absl::StrAppend(&name, "[", seen[static_cast<size_t>(f->index())]++, "]");
    uint32_t length = 0;
    if (!in->ReadVarint32(&length)) return false;
    if (f->type() == FieldDescriptor::TYPE_STRING) {
      std::string value;
      if (!in->ReadString(&value, static_cast<int>(length))) return false;
      const int64_t at = BadUtf8At(value);
      if (at >= 0) {
        *out = absl::StrFormat("field '%s' is not UTF-8: byte 0x%02x at %d", name,
                               static_cast<unsigned char>(value[static_cast<size_t>(at)]), at);
        return true;
      }
      continue;
    }
    const auto limit = in->PushLimit(static_cast<int>(length));
    if (Walk(f->message_type(), in, name, out, depth + 1)) return true;
    in->PopLimit(limit);
  }
  return false;
}

}  // namespace

std::string FindInvalidUtf8(const Descriptor* type, absl::string_view bytes) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  std::string found;
  Walk(type, &in, "", &found, 0);
  return found;
}

absl::Status ParseRequest(const grpc::ByteBuffer& buffer, google::protobuf::Message* m) {
  grpc::ByteBuffer copy(buffer);  // shares the slices
  {
    grpc::ProtoBufferReader reader(&copy);
    if (reader.status().ok() && m->ParseFromZeroCopyStream(&reader)) return absl::OkStatus();
  }
  const std::string what = m->GetDescriptor()->name();
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (buffer.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  const std::string utf8 = FindInvalidUtf8(m->GetDescriptor(), bytes);
  if (!utf8.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(utf8, " (in the ", what, "); string fields hold UTF-8 text"));
  }
  return absl::InvalidArgumentError(absl::StrCat("the request is not a ", what, " message"));
}

absl::Status ParseWithOutside(const grpc::ByteBuffer& buffer, google::protobuf::Message* m,
                              Splitter split_fn, HostBuffers* buffers, OutsideData* outside) {
  outside->bytes.clear();
  outside->pinned.clear();
  outside->buffers.clear();
  wire::SplitMessage split;
  if (buffers == nullptr || static_cast<int64_t>(buffer.Length()) < kOutsideBytes ||
      !split_fn(buffer, kOutsideBytes, &split) || split.taken().empty() ||
      !m->ParseFromString(split.rest())) {
    // Small, nothing large inline, or not well-formed: protobuf decides (and names what is
    // wrong).
    m->Clear();
    return ParseRequest(buffer, m);
  }
  for (const wire::SplitMessage::Taken& t : split.taken()) {
    HostBuffers::Lease b = buffers->Acquire(t.size);
    if (b == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no host memory for input ", t.input, "'s ", t.size, " bytes"));
    }
    split.CopyTo(t, b->data());
    const auto i = static_cast<size_t>(t.input);
    if (i >= outside->bytes.size()) {
      outside->bytes.resize(i + 1);
      outside->pinned.resize(i + 1, false);
    }
    outside->bytes[i] =
        absl::string_view(reinterpret_cast<const char*>(b->data()), static_cast<size_t>(t.size));
    outside->pinned[i] = b->pinned();
    outside->buffers.push_back(std::move(b));
  }
  return absl::OkStatus();
}

}  // namespace tc::server
