#include "server/pipeline/codec.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

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
    return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", t.shape_size(),
                                                   " exceeds the limit of ", kMaxRank));
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

absl::Status CheckBoolBytes(const void* p, int64_t n, absl::string_view what, int64_t base) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (int64_t i = 0; i < n; ++i) {
    if (b[i] > 1) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": byte ", base + i, " is ",
                                                     static_cast<int>(b[i]),
                                                     ", but bool elements must be 0 or 1"));
    }
  }
  return absl::OkStatus();
}

std::vector<bool> ReachedBytes(const TensorView& v) {
  // Dims that move: their sizes and strides in bytes.
  std::vector<std::pair<int64_t, int64_t>> dims;
  int64_t count = 1;
  const int64_t limit = 4 * v.storage_bytes + 4096;
  for (size_t d = 0; d < v.shape.size(); ++d) {
    if (v.shape[d] == 0) return std::vector<bool>(static_cast<size_t>(v.storage_bytes), false);
    if (v.shape[d] == 1 || v.strides[d] == 0) continue;
    dims.emplace_back(v.shape[d], v.strides[d]);
    if (count > limit / v.shape[d]) return {};
    count *= v.shape[d];
  }
  if (count >= v.storage_bytes) return {};  // reaches every byte, or overlaps: check them all
  std::vector<bool> reached(static_cast<size_t>(v.storage_bytes), false);
  std::vector<int64_t> index(dims.size(), 0);
  int64_t at = v.offset;
  for (int64_t i = 0; i < count; ++i) {
    reached[static_cast<size_t>(at)] = true;
    for (size_t d = dims.size(); d-- > 0;) {
      at += dims[d].second;
      if (++index[d] < dims[d].first) break;
      at -= dims[d].second * dims[d].first;
      index[d] = 0;
    }
  }
  return reached;
}

absl::Status CheckBoolBytesReached(const void* p, int64_t n, const std::vector<bool>& reached,
                                   absl::string_view what, int64_t base) {
  if (reached.empty()) return CheckBoolBytes(p, n, what, base);
  const auto* b = static_cast<const unsigned char*>(p);
  for (int64_t i = 0; i < n; ++i) {
    if (b[i] > 1 && reached[static_cast<size_t>(base + i)]) return CheckBoolBytes(b + i, 1, what, base + i);
  }
  return absl::OkStatus();
}

absl::Status CheckBoolView(const TensorView& v, absl::string_view what) {
  return CheckBoolBytesReached(v.data, v.storage_bytes, ReachedBytes(v), what);
}

absl::StatusOr<TensorView> InlineView(TensorView meta, absl::string_view bytes,
                                      absl::string_view what,
                                      std::vector<std::unique_ptr<std::string>>& owned) {
  TensorView v = std::move(meta);
  if (reinterpret_cast<uintptr_t>(bytes.data()) % ItemSize(v.dtype) != 0) {
    owned.push_back(std::make_unique<std::string>(bytes));
    bytes = *owned.back();
  }
  v.data = reinterpret_cast<const std::byte*>(bytes.data());
  v.storage_bytes = static_cast<int64_t>(bytes.size());
  if (auto s = ValidateView(v, what); !s.ok()) return s;
  if (v.dtype == DType::kBool) {
    if (auto s = CheckBoolView(v, what); !s.ok()) return s;
  }
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
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("output_dtype: ", t.status().message()));
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
    return absl::InvalidArgumentError(absl::StrCat(request.output_strides_size(),
                                                   " output strides exceed the rank limit of ",
                                                   kMaxRank));
  }
  o.strides.assign(request.output_strides().begin(), request.output_strides().end());
  return o;
}

void SetOutputMeta(const Plan& plan, v1::Tensor* t) {
  t->set_dtype(DTypeToProto(plan.out_dtype));
  t->mutable_shape()->Assign(plan.out_shape.begin(), plan.out_shape.end());
  t->mutable_strides()->Assign(plan.out_strides.begin(), plan.out_strides.end());
  t->set_offset(0);
}

std::byte* PrepareOutput(const Plan& plan, v1::Tensor* t) {
  SetOutputMeta(plan, t);
  std::string* data = t->mutable_data();
  data->resize(static_cast<size_t>(plan.out_storage_bytes));
  return reinterpret_cast<std::byte*>(data->data());
}

}  // namespace tc::server
