#include "server/kserve/convert.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/catalog.h"
#include "kernels/engine.h"
#include "proto/chunk_wire.h"
#include "server/kserve/models.h"
#include "server/pipeline/job.h"

namespace tc::server {

namespace {

// Request parameters of the protocol that schedule requests in Triton; accepted, no effect.
bool IsSchedulingParameter(absl::string_view key) {
  return key == "priority" || key == "timeout" || key == "sequence_id" || key == "sequence_start" ||
         key == "sequence_end" || absl::StartsWith(key, "triton_");
}

const char* ParameterTypeName(const inf::InferParameter& p) {
  switch (p.parameter_choice_case()) {
    case inf::InferParameter::kBoolParam:
      return "bool_param";
    case inf::InferParameter::kInt64Param:
      return "int64_param";
    case inf::InferParameter::kStringParam:
      return "string_param";
    case inf::InferParameter::kDoubleParam:
      return "double_param";
    case inf::InferParameter::kUint64Param:
      return "uint64_param";
    case inf::InferParameter::PARAMETER_CHOICE_NOT_SET:
      break;
  }
  return "no value";
}

const AttrSpec* FindAttr(const OpSpec& spec, absl::string_view name) {
  for (const AttrSpec& a : spec.attrs) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

// A request parameter as an op attribute.
absl::Status ToAttribute(const OpSpec* spec, const std::string& key, const inf::InferParameter& p,
                         AttrValue* out) {
  switch (p.parameter_choice_case()) {
    case inf::InferParameter::kBoolParam:
      *out = p.bool_param();
      return absl::OkStatus();
    case inf::InferParameter::kInt64Param:
      *out = static_cast<int64_t>(p.int64_param());
      return absl::OkStatus();
    case inf::InferParameter::kDoubleParam:
      *out = p.double_param();
      return absl::OkStatus();
    case inf::InferParameter::kUint64Param:
      if (p.uint64_param() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter '", key, "': ", p.uint64_param(), " is out of range"));
      }
      *out = static_cast<int64_t>(p.uint64_param());
      return absl::OkStatus();
    case inf::InferParameter::kStringParam: {
      // A dtype attribute takes a dtype's name, ours ("float16") or the protocol's ("FP16").
      const AttrSpec* a = spec != nullptr ? FindAttr(*spec, key) : nullptr;
      if (a != nullptr && a->type == AttrType::kDType) {
        std::optional<DType> t = DTypeFromName(p.string_param());
        if (!t) t = DTypeFromV2(p.string_param());
        if (!t) {
          return absl::InvalidArgumentError(
              absl::StrCat("parameter '", key, "': '", p.string_param(), "' is not a datatype"));
        }
        *out = *t;
        return absl::OkStatus();
      }
      *out = p.string_param();
      return absl::OkStatus();
    }
    case inf::InferParameter::PARAMETER_CHOICE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("parameter '", key, "' has no value"));
}

// A tensor's shared-memory parameters: its region (empty: none), offset and byte size.
struct ShmParams {
  std::string region;
  int64_t offset = 0;
  int64_t bytes = -1;
};

absl::StatusOr<int64_t> IntParameter(const std::string& key, const inf::InferParameter& p,
                                     absl::string_view what) {
  if (p.parameter_choice_case() == inf::InferParameter::kInt64Param) return p.int64_param();
  if (p.parameter_choice_case() == inf::InferParameter::kUint64Param &&
      p.uint64_param() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(p.uint64_param());
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": parameter '", key, "' must be an int64_param, got ", ParameterTypeName(p)));
}

absl::StatusOr<ShmParams> TensorParameters(
    const google::protobuf::Map<std::string, inf::InferParameter>& params, absl::string_view what) {
  ShmParams shm;
  bool offset_given = false;
  for (const auto& [key, p] : params) {
    if (key == "shared_memory_region") {
      if (p.parameter_choice_case() != inf::InferParameter::kStringParam) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": parameter '", key, "' must be a string_param, got ", ParameterTypeName(p)));
      }
      shm.region = p.string_param();
    } else if (key == "shared_memory_offset" || key == "shared_memory_byte_size") {
      auto v = IntParameter(key, p, what);
      if (!v.ok()) return v.status();
      if (*v < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": parameter '", key, "' is negative"));
      }
      if (key == "shared_memory_offset") {
        shm.offset = *v;
        offset_given = true;
      } else {
        shm.bytes = *v;
      }
    } else if (absl::StartsWith(key, "shared_memory_")) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": parameter '", key,
                       "' is not one of shared_memory_region, "
                       "shared_memory_offset, shared_memory_byte_size"));
    } else if (key == "classification") {
      return absl::InvalidArgumentError(
          absl::StrCat(what,
                       ": classification outputs are not served: the ops' outputs are "
                       "tensors"));
    }
  }
  if (shm.region.empty() && (offset_given || shm.bytes >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": shared_memory_offset and shared_memory_byte_size need shared_memory_region"));
  }
  if (!shm.region.empty() && shm.bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shared_memory_region needs shared_memory_byte_size"));
  }
  return shm;
}

absl::StatusOr<std::shared_ptr<Region>> FindRegion(const ShmLookup& shm, const std::string& name) {
  if (!shm) {
    return absl::InvalidArgumentError(
        "shared-memory tensors need a server started with --system_shared_memory (or a GPU "
        "for CUDA shared memory); tensorcompute.v1 also takes regions (RegisterRegion) and "
        "CUDA IPC memory");
  }
  return shm(name);
}

// Typed contents as little-endian bytes of `t`; `count` values expected.
absl::Status ContentsToBytes(const inf::InferTensorContents& c, DType t, int64_t count,
                             absl::string_view what, std::string* out) {
  const char* field = nullptr;
  int64_t have = 0;
  const auto take = [&](const auto& values, const char* name, auto convert) {
    field = name;
    have = values.size();
    if (have != count) return;
    out->resize(static_cast<size_t>(count * ItemSize(t)));
    char* p = out->data();
    for (const auto& v : values) {
      const auto x = convert(v);
      std::memcpy(p, &x, sizeof(x));
      p += sizeof(x);
    }
  };
  switch (t) {
    case DType::kBool:
      take(c.bool_contents(), "bool_contents", [](bool v) { return static_cast<uint8_t>(v); });
      break;
    case DType::kUInt8:
      take(c.uint_contents(), "uint_contents", [](uint32_t v) { return static_cast<uint8_t>(v); });
      break;
    case DType::kInt8:
      take(c.int_contents(), "int_contents", [](int32_t v) { return static_cast<int8_t>(v); });
      break;
    case DType::kInt16:
      take(c.int_contents(), "int_contents", [](int32_t v) { return static_cast<int16_t>(v); });
      break;
    case DType::kInt32:
      take(c.int_contents(), "int_contents", [](int32_t v) { return v; });
      break;
    case DType::kInt64:
      take(c.int64_contents(), "int64_contents", [](int64_t v) { return v; });
      break;
    case DType::kFloat32:
      take(c.fp32_contents(), "fp32_contents", [](float v) { return v; });
      break;
    case DType::kFloat64:
      take(c.fp64_contents(), "fp64_contents", [](double v) { return v; });
      break;
    case DType::kFloat16:
    case DType::kBFloat16:
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", V2DatatypeName(t), " has no typed contents; send it in raw_input_contents"));
  }
  if (have != count) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": its shape holds ", count,
                                                   " elements, contents.", field, " has ", have));
  }
  return absl::OkStatus();
}

// Elements of `shape`, checked: dims >= 0, then the limits as v1 checks them (CheckSize).
absl::StatusOr<int64_t> CountElements(const google::protobuf::RepeatedField<int64_t>& shape,
                                      const ServiceOptions& options, absl::string_view what) {
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": shape [", absl::StrJoin(shape, ","), "] has a negative dim"));
    }
  }
  return CheckSize(absl::MakeConstSpan(shape.data(), static_cast<size_t>(shape.size())), what,
                   options);
}

}  // namespace

absl::Status ToComputeSpec(const inf::ModelInferRequest& request, const ServiceOptions& options,
                           const ShmLookup& shm, ShmReadBudget* budget, ComputeSpec* out,
                           std::optional<ShmTarget>* output_shm, const OutsideData* outside) {
  output_shm->reset();
  const std::string& model = request.model_name();
  const bool expression = model == kExpressionModel;
  const int n = request.inputs_size();
  const CatalogEntry* op = nullptr;
  if (!expression) {
    op = FindOp(model, n);
    if (op == nullptr && FindOp(model) == nullptr) return UnknownModel(model);
  }
  if (absl::Status s = CheckVersion(model, request.model_version()); !s.ok()) return s;
  if (!expression && op == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", model, "' takes ", AritiesOf(model), ", got ", n));
  }

  if (expression && n > kMaxExprInputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("an expression takes at most ", kMaxExprInputs, " inputs, got ", n));
  }
  // Where each input goes: the op's inputs are INPUT0..INPUTn-1, in any order; an
  // expression's are its variables, in the request's order.
  std::vector<int> slot(n, -1);
  if (expression) {
    for (int i = 0; i < n; ++i) slot[i] = i;
  } else {
    for (int i = 0; i < n; ++i) {
      const std::string& name = request.inputs(i).name();
      // INPUT0, INPUT1, ...: the number after the prefix, below n, in its plain spelling.
      int k = -1;
      const bool known = absl::StartsWith(name, "INPUT") &&
                         absl::SimpleAtoi(absl::string_view(name).substr(5), &k) && k >= 0 &&
                         k < n && name == InputName(k);
      if (!known) {
        std::vector<std::string> expected;
        for (int j = 0; j < n; ++j) expected.push_back(InputName(j));
        return absl::InvalidArgumentError(absl::StrCat("model '", model, "' has no input '", name,
                                                       "'; its inputs are ",
                                                       absl::StrJoin(expected, ", ")));
      }
      if (std::find(slot.begin(), slot.end(), k) != slot.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("model '", model, "': input '", name, "' is given twice"));
      }
      slot[i] = k;
    }
  }

  // One raw entry per input not in shared memory, in input order.
  const bool raw = request.raw_input_contents_size() > 0;
  int next_raw = 0;
  // Bytes read out of system shared memory so far: within the request limit before each read.
  int64_t copied = 0;
  out->op = op;
  out->inputs.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const inf::ModelInferRequest::InferInputTensor& in = request.inputs(i);
    const std::string what = absl::StrCat("input '", in.name(), "'");
    auto params = TensorParameters(in.parameters(), what);
    if (!params.ok()) return params.status();
    const std::optional<DType> t = DTypeFromV2(in.datatype());
    if (!t) {
      std::vector<std::string> names;
      for (int k = 0; k < kNumDTypes; ++k) names.push_back(V2DatatypeName(static_cast<DType>(k)));
      return absl::InvalidArgumentError(absl::StrCat(what, ": datatype '", in.datatype(),
                                                     "' is not served; the datatypes are ",
                                                     absl::StrJoin(names, ", ")));
    }
    auto count = CountElements(in.shape(), options, what);
    if (!count.ok()) return count.status();
    InputSpec& tensor = out->inputs[static_cast<size_t>(slot[i])];
    tensor.what = what;
    tensor.view.dtype = *t;
    tensor.view.shape.assign(in.shape().begin(), in.shape().end());
    tensor.view.strides = ContiguousStrides(tensor.view.shape);
    const int64_t bytes = *count * ItemSize(*t);
    if (!params->region.empty()) {
      if (in.has_contents()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": contents and shared_memory_region are not taken together"));
      }
      if (params->bytes != bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": shape [", absl::StrJoin(in.shape(), ","), "] of ", in.datatype(),
                         " is ", bytes, " bytes, shared_memory_byte_size says ", params->bytes));
      }
      auto region = FindRegion(shm, params->region);
      if (!region.ok()) return region.status();
      if (const SystemShm* file = (*region)->file(); file != nullptr) {
        if (bytes > options.max_request_bytes - copied) {
          return absl::ResourceExhaustedError(
              absl::StrCat("the inputs in shared memory come to more than this server's limit of ",
                           options.max_request_bytes, " bytes for one request"));
        }
        copied += bytes;
        if (budget == nullptr) return absl::InternalError("no budget for reading shared memory");
        if (absl::Status reserved = budget->Reserve(bytes); !reserved.ok()) {
          return absl::Status(reserved.code(),
                              absl::StrCat(what, " in shared memory: ", reserved.message()));
        }
        out->device = budget->device;
        std::string& read = out->owned.emplace_back();
        if (absl::Status s = file->Read(params->offset, bytes, &read); !s.ok()) {
          return s;
        }
        tensor.bytes = read;
      } else {
        // GPU memory: the engine reads it where it lies (range and alignment checked there).
        tensor.source = InputSource::kRegion;
        tensor.region = (*region)->id;
        tensor.found_region = *std::move(region);
        tensor.region_offset = params->offset;
        tensor.storage_bytes = bytes;
      }
    } else if (raw) {
      if (in.has_contents()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": contents and raw_input_contents are not taken together"));
      }
      if (next_raw >= request.raw_input_contents_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("raw_input_contents has ", request.raw_input_contents_size(),
                         " entries: one is needed per input not in shared memory, in input order"));
      }
      absl::string_view data = request.raw_input_contents(next_raw);
      if (outside != nullptr && outside->At(next_raw).data() != nullptr) {
        data = outside->At(next_raw);
        tensor.pinned = outside->pinned[static_cast<size_t>(next_raw)];
      }
      if (static_cast<int64_t>(data.size()) != bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": shape [", absl::StrJoin(in.shape(), ","), "] of ", in.datatype(), " is ",
            bytes, " bytes, raw_input_contents[", next_raw, "] has ", data.size()));
      }
      ++next_raw;
      // Computed on where it lies (in the request or outside it), which outlives the spec.
      tensor.bytes = data;
    } else {
      std::string& converted = out->owned.emplace_back();
      if (absl::Status s = ContentsToBytes(in.contents(), *t, *count, what, &converted); !s.ok()) {
        return s;
      }
      tensor.bytes = converted;
    }
    if (expression) out->input_names.push_back(in.name());
  }
  if (raw && next_raw != request.raw_input_contents_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw_input_contents has ", request.raw_input_contents_size(), " entries for ",
                     next_raw, " inputs not in shared memory: one per such input, in input order"));
  }

  for (const auto& [key, p] : request.parameters()) {
    if (IsSchedulingParameter(key)) continue;
    if (expression && key == kExpressionParameter) {
      if (p.parameter_choice_case() != inf::InferParameter::kStringParam) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", key, "' must be a string_param, got ", ParameterTypeName(p)));
      }
      out->expression = p.string_param();
      continue;
    }
    if (expression) {
      return absl::InvalidArgumentError(
          "attributes are written inside an expression (clamp(a, min=0)), not beside it");
    }
    AttrValue attr;
    if (absl::Status s = ToAttribute(&op->spec, key, p, &attr); !s.ok()) return s;
    out->attrs[key] = std::move(attr);
  }
  if (expression && out->expression.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("model '", kExpressionModel,
                                                   "' needs the request parameter '",
                                                   kExpressionParameter, "' (a string_param)"));
  }

  if (request.outputs_size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("output '", kOutputName, "' is requested ",
                                                   request.outputs_size(), " times; model '", model,
                                                   "' has that one output"));
  }
  for (const auto& requested : request.outputs()) {
    if (requested.name() != kOutputName) {
      return absl::InvalidArgumentError(absl::StrCat("model '", model, "' has no output '",
                                                     requested.name(), "'; its output is ",
                                                     kOutputName));
    }
    auto params =
        TensorParameters(requested.parameters(), absl::StrCat("output '", requested.name(), "'"));
    if (!params.ok()) return params.status();
    if (!params->region.empty()) {
      auto region = FindRegion(shm, params->region);
      if (!region.ok()) return region.status();
      if ((*region)->file() == nullptr) {
        out->output_region = (*region)->id;
        out->found_output_region = *region;
        out->output_region_offset = params->offset;
      }
      *output_shm = ShmTarget{*std::move(region), params->offset, params->bytes};
    }
  }
  return absl::OkStatus();
}

absl::Status ShmReadBudget::Reserve(int64_t bytes) {
  if (devices == nullptr) return absl::InternalError("no budget for reading shared memory");
  if (device == nullptr) device = &devices->LeastLoaded();
  auto reserved = device->Reserve(bytes, absl::InfiniteFuture());
  if (!reserved.ok()) return reserved.status();
  held.push_back(*std::move(reserved));
  return absl::OkStatus();
}

bool UsesSharedMemory(const inf::ModelInferRequest& request) {
  for (const auto& in : request.inputs()) {
    if (in.parameters().contains("shared_memory_region")) return true;
  }
  for (const auto& out : request.outputs()) {
    if (out.parameters().contains("shared_memory_region")) return true;
  }
  return false;
}

bool ConvertsOnThePool(const inf::ModelInferRequest& request) {
  if (UsesSharedMemory(request)) return true;
  for (const auto& in : request.inputs()) {
    if (in.has_contents()) return true;
  }
  return false;
}

absl::Status ToInferResponse(const inf::ModelInferRequest& request, ComputeResult& result,
                             const std::optional<ShmTarget>& output_shm,
                             inf::ModelInferResponse* out, bool bytes_beside) {
  if (!result.has_output()) return absl::InternalError("the computation left no result");
  const TensorView& t = result.output();
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  const bool in_region = !result.region().empty();
  if ((!in_region && result.byte_size() != n * ItemSize(t.dtype)) || t.offset != 0) {
    return absl::InternalError("the result is not a dense tensor");
  }
  out->set_model_name(request.model_name());
  out->set_model_version(kVersion);
  out->set_id(request.id());
  inf::ModelInferResponse::InferOutputTensor* o = out->add_outputs();
  o->set_name(kOutputName);
  o->set_datatype(V2DatatypeName(t.dtype));
  o->mutable_shape()->Assign(t.shape.begin(), t.shape.end());
  if (output_shm) {
    // (Written in place for GPU memory before its size could be compared: the bytes past
    // shared_memory_byte_size are still the caller's registered region.)
    const int64_t bytes = n * ItemSize(t.dtype);
    if (bytes > output_shm->bytes) {
      return absl::InvalidArgumentError(absl::StrCat("output '", kOutputName, "' is ", bytes,
                                                     " bytes, shared_memory_byte_size gives ",
                                                     output_shm->bytes));
    }
    if (const SystemShm* file = output_shm->region ? output_shm->region->file() : nullptr) {
      if (absl::Status s = file->Write(
              output_shm->offset, absl::string_view(reinterpret_cast<const char*>(result.bytes()),
                                                    static_cast<size_t>(result.byte_size())));
          !s.ok()) {
        return s;
      }
    }
    if (!bytes_beside) out->add_raw_output_contents();
    return absl::OkStatus();
  }
  if (!bytes_beside) *out->add_raw_output_contents() = result.TakeString();
  return absl::OkStatus();
}

grpc::ByteBuffer EncodeInferResponse(const inf::ModelInferResponse& meta, ComputeResult& result,
                                     const std::optional<ShmTarget>& output_shm) {
  return wire::InferResponseMessage(meta.SerializeAsString(), output_shm || !result.has_bytes()
                                                                  ? grpc::Slice()
                                                                  : result.TakeSlice());
}

}  // namespace tc::server
