#include "server/v1/codec.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "proto/chunk_wire.h"

namespace tc::server {

absl::StatusOr<DType> DTypeFromProto(int wire) {
  // The wire enum is the engine's order shifted by one (0 is DTYPE_UNSPECIFIED).
  if (wire >= 1 && wire <= kNumDTypes) return static_cast<DType>(wire - 1);
  if (wire == v1::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError("dtype is missing (DTYPE_UNSPECIFIED)");
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype enum value ", wire));
}

v1::DType DTypeToProto(DType t) { return static_cast<v1::DType>(static_cast<int>(t) + 1); }

absl::StatusOr<TensorView> DecodeView(const v1::Tensor& t, absl::string_view what) {
  auto dtype = DTypeFromProto(t.dtype());
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", dtype.status().message()));
  }
  TensorView v;
  v.dtype = *dtype;
  if (t.shape_size() > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": rank ", t.shape_size(), " exceeds the limit of ", kMaxRank));
  }
  v.shape.assign(t.shape().begin(), t.shape().end());
  if (t.strides_size() == 0) {
    auto numel = CheckedNumel(v.shape);
    if (!numel.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", numel.status().message()));
    }
    v.strides = ContiguousStrides(v.shape);
  } else if (t.strides_size() != t.shape_size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", t.strides_size(),
                                                   " strides given for rank ", t.shape_size(),
                                                   " (leave strides empty for C-contiguous)"));
  } else {
    v.strides.assign(t.strides().begin(), t.strides().end());
  }
  v.offset = t.offset();
  return v;
}

absl::StatusOr<TensorView> DecodeInline(const v1::Tensor& t, absl::string_view what,
                                        std::vector<std::unique_ptr<std::string>>& owned) {
  auto v = DecodeView(t, what);
  if (!v.ok()) return v.status();
  return InlineView(*std::move(v), t.data(), what, owned);
}

absl::StatusOr<DecodedInputs> DecodeInputs(
    const google::protobuf::RepeatedPtrField<v1::Tensor>& tensors) {
  DecodedInputs out;
  out.views.reserve(tensors.size());
  for (int i = 0; i < tensors.size(); ++i) {
    auto v = DecodeInline(tensors[i], absl::StrCat("input ", i), out.owned);
    if (!v.ok()) return v.status();
    out.views.push_back(*std::move(v));
  }
  return out;
}

void SetTensorMeta(const TensorView& v, v1::Tensor* t) {
  t->set_dtype(DTypeToProto(v.dtype));
  t->mutable_shape()->Assign(v.shape.begin(), v.shape.end());
  t->mutable_strides()->Assign(v.strides.begin(), v.strides.end());
  t->set_offset(v.offset);
  t->set_storage_bytes(v.storage_bytes);
}

absl::StatusOr<AttrMap> DecodeAttributes(
    const google::protobuf::Map<std::string, v1::Attribute>& attrs) {
  AttrMap out;
  for (const auto& [name, a] : attrs) {
    switch (a.value_case()) {
      case v1::Attribute::kFloatValue:
        out[name] = a.float_value();
        break;
      case v1::Attribute::kIntValue:
        out[name] = static_cast<int64_t>(a.int_value());
        break;
      case v1::Attribute::kBoolValue:
        out[name] = a.bool_value();
        break;
      case v1::Attribute::kDtypeValue: {
        auto t = DTypeFromProto(a.dtype_value());
        if (!t.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("attribute '", name, "': ", t.status().message()));
        }
        out[name] = *t;
        break;
      }
      case v1::Attribute::kStringValue:
        out[name] = a.string_value();
        break;
      case v1::Attribute::VALUE_NOT_SET:
        return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' has no value"));
    }
  }
  return out;
}

absl::StatusOr<OutputOptions> DecodeOutputOptions(const v1::ComputeRequest& request) {
  OutputOptions o;
  if (request.output_dtype() != v1::DTYPE_UNSPECIFIED) {
    auto t = DTypeFromProto(request.output_dtype());
    if (!t.ok())
      return absl::InvalidArgumentError(absl::StrCat("output_dtype: ", t.status().message()));
    o.dtype = *t;
  }
  switch (request.output_layout()) {
    case v1::OUTPUT_LAYOUT_CONTIGUOUS:
      break;
    case v1::OUTPUT_LAYOUT_LIKE_FIRST_INPUT:
      o.layout = OutputOptions::Layout::kLikeFirstInput;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown output_layout enum value ", request.output_layout()));
  }
  if (request.output_strides_size() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        request.output_strides_size(), " output strides exceed the rank limit of ", kMaxRank));
  }
  o.strides.assign(request.output_strides().begin(), request.output_strides().end());
  return o;
}

void SetResultOutput(const ComputeResult& result, v1::Tensor* t) {
  const TensorView& v = result.output();
  if (result.returned()) {
    t->set_dtype(DTypeToProto(v.dtype));
    t->mutable_shape()->Assign(v.shape.begin(), v.shape.end());
    t->mutable_strides()->Assign(v.strides.begin(), v.strides.end());
    t->set_offset(0);
    return;
  }
  SetTensorMeta(v, t);
  if (!result.handle().empty()) t->set_handle(result.handle());
  if (!result.region().empty()) {
    t->set_region(result.region());
    t->set_region_offset(result.region_offset());
  }
}

grpc::ByteBuffer EncodeComputeResponse(ComputeResult& result) {
  v1::ComputeResponse message;
  if (result.has_output()) SetResultOutput(result, message.mutable_output());
  if (!result.has_bytes()) {
    grpc::Slice only(message.SerializeAsString());
    return grpc::ByteBuffer(&only, 1);
  }
  return wire::ComputeResponseMessage(message.output().SerializeAsString(), result.TakeSlice());
}

}  // namespace tc::server
