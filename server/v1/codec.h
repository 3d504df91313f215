// tensorcompute.v1 <-> engine: wire tensors to TensorViews (checked), results back to wire
// tensors.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "google/protobuf/map.h"
#include "kernels/dtype.h"
#include "kernels/engine.h"
#include "kernels/ops/attributes.h"
#include "kernels/tensor_view.h"
#include "server/pipeline/result.h"
#include "server/pipeline/views.h"
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

// Every tensor inline (DecodeInline), named "input i".
absl::StatusOr<DecodedInputs> DecodeInputs(
    const google::protobuf::RepeatedPtrField<v1::Tensor>& tensors);

absl::StatusOr<AttrMap> DecodeAttributes(
    const google::protobuf::Map<std::string, v1::Attribute>& attrs);

// The request's output_dtype, output_layout and output_strides.
absl::StatusOr<OutputOptions> DecodeOutputOptions(const v1::ComputeRequest& request);

// dtype, shape, strides, offset and storage_bytes of `v` into `t` (no data).
void SetTensorMeta(const TensorView& v, v1::Tensor* t);

// The result's output into `t`: its metadata (SetTensorMeta; storage_bytes left out where
// the bytes come with it), and its handle or region; no data.
void SetResultOutput(const ComputeResult& result, v1::Tensor* t);

// The Compute reply of `result`: a ComputeResponse whose output's bytes lie beside its
// metadata as a slice over the result's memory (taken from it, not copied).
grpc::ByteBuffer EncodeComputeResponse(ComputeResult& result);

}  // namespace tc::server
