// proto <-> engine: wire tensors to TensorViews (checked), results back to wire tensors.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/map.h"
#include "kernels/dtype.h"
#include "kernels/engine.h"
#include "kernels/ops/attributes.h"
#include "kernels/tensor_view.h"
#include "tensorcompute/v1/tensor_service.pb.h"

namespace tc::server {

namespace v1 = ::tensorcompute::v1;

absl::StatusOr<DType> DTypeFromProto(int wire);

// What a compute request runs, for metrics and messages: its op's name, or "expression" (the
// expression's text is the client's and never becomes a label).
inline std::string OpLabel(const v1::ComputeRequest& r) {
  return r.expression().empty() ? r.op() : "expression";
}
v1::DType DTypeToProto(DType t);

// Views of the request's tensors, checked with ValidateView. They point into the request,
// except where a blob is not aligned to its element size: that one is copied into `owned`.
struct DecodedInputs {
  std::vector<TensorView> views;
  std::vector<std::unique_ptr<std::string>> owned;
};

// dtype, shape, strides (C-contiguous when empty) and offset of `t`, checked for rank, dims
// and stride count; data and storage_bytes left empty. `what` names it in errors.
absl::StatusOr<TensorView> DecodeView(const v1::Tensor& t, absl::string_view what);

// DecodeView over `t.data()`, checked with ValidateView. A blob not aligned to its element
// size is copied into `owned`.
absl::StatusOr<TensorView> DecodeInline(const v1::Tensor& t, absl::string_view what,
                                        std::vector<std::unique_ptr<std::string>>& owned);

// `meta` (a decoded view: dtype, shape, strides, offset) over `bytes`, checked with
// ValidateView (and every bool byte it reaches being 0 or 1). Bytes not aligned to the element
// size are copied into `owned`.
absl::StatusOr<TensorView> InlineView(TensorView meta, absl::string_view bytes,
                                      absl::string_view what,
                                      std::vector<std::unique_ptr<std::string>>& owned);

// bool elements are one byte, 0 or 1: INVALID_ARGUMENT naming the first other byte in
// [p, p + n), counted from byte `base` of `what`'s storage.
absl::Status CheckBoolBytes(const void* p, int64_t n, absl::string_view what, int64_t base = 0);

// The bytes of a bool view's storage that its elements lie at (as byte offsets from the
// storage's start), for checking those alone: a view may leave bytes it never reaches holding
// anything. Empty when every byte is to be checked: the view reaches them all, or its
// overlapping dims would take longer to walk than the storage is long.
std::vector<bool> ReachedBytes(const TensorView& v);

// CheckBoolBytes over the bytes `reached` marks (all of them when it is empty).
absl::Status CheckBoolBytesReached(const void* p, int64_t n, const std::vector<bool>& reached,
                                   absl::string_view what, int64_t base = 0);

// A bool view over bytes at hand (v.data holds its storage_bytes): the bytes it reaches.
absl::Status CheckBoolView(const TensorView& v, absl::string_view what);

// Every tensor inline (DecodeInline), named "input i".
absl::StatusOr<DecodedInputs> DecodeInputs(
    const google::protobuf::RepeatedPtrField<v1::Tensor>& tensors);

absl::StatusOr<AttrMap> DecodeAttributes(
    const google::protobuf::Map<std::string, v1::Attribute>& attrs);

// The request's output_dtype, output_layout and output_strides.
absl::StatusOr<OutputOptions> DecodeOutputOptions(const v1::ComputeRequest& request);

// dtype, shape, strides, offset and storage_bytes of `v` into `t` (no data).
void SetTensorMeta(const TensorView& v, v1::Tensor* t);

// The plan's output metadata into `t`: dtype, shape, strides, offset 0 (no data).
void SetOutputMeta(const Plan& plan, v1::Tensor* t);

// Fills `t` with the plan's output metadata and returns its data buffer (sized, zeroed, ready
// for the backend to write).
std::byte* PrepareOutput(const Plan& plan, v1::Tensor* t);

}  // namespace tc::server
