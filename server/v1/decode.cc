#include "server/v1/decode.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/chunk_wire.h"
#include "server/pipeline/job.h"
#include "server/pipeline/parse.h"

namespace tc::server {

absl::StatusOr<ComputeSpec> DecodeCompute(const v1::ComputeRequest& request, bool allow_streamed,
                                          const ServiceOptions& limits,
                                          const OutsideData* outside) {
  ComputeSpec spec;
  // The op first: "unknown op" is the more useful message when the inputs are wrong too.
  const bool expression = !request.expression().empty();
  if (expression) {
    if (!request.op().empty()) {
      return absl::InvalidArgumentError("both op and expression are set: send one");
    }
    if (!request.attributes().empty()) {
      return absl::InvalidArgumentError(
          "attributes are written inside an expression (clamp(a, min=0)), not beside it");
    }
    spec.expression = request.expression();
    spec.input_names.assign(request.input_names().begin(), request.input_names().end());
  } else {
    if (request.input_names_size() > 0) {
      return absl::InvalidArgumentError("input_names name an expression's inputs; op is set");
    }
    auto found = LookupOp(request.op(), request.inputs_size());
    if (!found.ok()) return found.status();
    spec.op = *found;
  }
  spec.inputs.resize(static_cast<size_t>(request.inputs_size()));
  for (int i = 0; i < request.inputs_size(); ++i) {
    const v1::Tensor& t = request.inputs(i);
    InputSpec& in = spec.inputs[static_cast<size_t>(i)];
    in.what = absl::StrCat("input ", i);
    // The tensor's bytes: in the message, or taken out of it as it was parsed.
    absl::string_view data = t.data();
    bool pinned = false;
    if (outside != nullptr && outside->At(i).data() != nullptr) {
      data = outside->bytes[static_cast<size_t>(i)];
      pinned = outside->pinned[static_cast<size_t>(i)];
    }
    // The limits first, as KServe v2 checks them: a shape past them is refused whatever its
    // bytes. (A whole resident tensor's shape is its own, checked when it is found.)
    if (auto s =
            CheckSize(absl::MakeConstSpan(t.shape().data(), static_cast<size_t>(t.shape_size())),
                      in.what, limits);
        !s.ok()) {
      return s.status();
    }
    if (!t.handle().empty()) {
      if (!data.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(in.what, ": both handle and data are set"));
      }
      in.source = InputSource::kResident;
      in.handle = t.handle();
      in.whole = t.dtype() == v1::DTYPE_UNSPECIFIED && t.shape_size() == 0 &&
                 t.strides_size() == 0 && t.offset() == 0;
      if (in.whole) continue;
    } else if (!t.region().empty()) {
      if (!data.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(in.what, ": both region and data are set"));
      }
      in.source = InputSource::kRegion;
      in.region = t.region();
      in.region_offset = t.region_offset();
      in.storage_bytes = t.storage_bytes();
    } else if (data.empty() && t.storage_bytes() > 0) {
      if (!allow_streamed && !request.plan_only()) {
        return absl::InvalidArgumentError(
            absl::StrCat(in.what, ": storage_bytes is ", t.storage_bytes(),
                         " but no data was sent; send large inputs in chunks with ComputeStream"));
      }
      in.source = InputSource::kStreamed;
      in.storage_bytes = t.storage_bytes();
    } else {
      in.source = InputSource::kInline;
      in.bytes = data;
      in.pinned = pinned;
    }
    auto view = DecodeView(t, in.what);
    if (!view.ok()) return view.status();
    in.view = *std::move(view);
    if (in.source == InputSource::kStreamed) {
      in.view.storage_bytes = in.storage_bytes;
      if (auto s = ValidateView(in.view, in.what); !s.ok()) return s;
    }
  }
  auto output = DecodeOutputOptions(request);
  if (!output.ok()) return output.status();
  spec.output = *std::move(output);
  if (!expression) {
    auto attrs = DecodeAttributes(request.attributes());
    if (!attrs.ok()) return attrs.status();
    spec.attrs = *std::move(attrs);
  }
  if (request.plan_only() && allow_streamed) {
    return absl::InvalidArgumentError(
        "plan_only is answered by Compute: ComputeStream runs its request");
  }
  spec.plan_only = request.plan_only();
  spec.keep_output_resident = request.keep_output_resident();
  spec.resident_ttl_seconds = request.resident_ttl_seconds();
  spec.output_region = request.output_region();
  spec.output_region_offset = request.output_region_offset();
  return spec;
}

absl::Status ParseComputeRequest(const grpc::ByteBuffer& buffer, v1::ComputeRequest* request,
                                 HostBuffers* buffers, OutsideData* outside) {
  return ParseWithOutside(buffer, request, wire::SplitComputeRequest, buffers, outside);
}

}  // namespace tc::server
