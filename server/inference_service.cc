#include "server/inference_service.h"

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
#include "kernels/planner.h"
#include "kernels/expr/typing.h"
#include "server/codec.h"
#include "server/grpc_status.h"
#include "server/job.h"
#include "server/unary_call.h"

#ifndef TC_VERSION
#define TC_VERSION "unknown"
#endif

namespace tc::server {

namespace {

// The model that runs an expression; its text is the request parameter of the same name.
constexpr char kExpressionModel[] = "expression";
constexpr char kExpressionParameter[] = "expression";
// Every model has this one version.
constexpr char kVersion[] = "1";
constexpr char kOutputName[] = "OUTPUT0";

std::string InputName(int i) { return absl::StrCat("INPUT", i); }

// Request parameters of the protocol that schedule requests in Triton; accepted, no effect.
bool IsSchedulingParameter(absl::string_view key) {
  return key == "priority" || key == "timeout" || key == "sequence_id" ||
         key == "sequence_start" || key == "sequence_end" || absl::StartsWith(key, "triton_");
}

bool KnownModel(absl::string_view name) {
  return name == kExpressionModel || FindOp(name) != nullptr;
}

absl::Status CheckVersion(absl::string_view model, absl::string_view version) {
  if (version.empty() || version == kVersion) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("model '", model, "' has no version '", version,
                                          "'; its one version is ", kVersion));
}

absl::Status UnknownModel(absl::string_view name) {
  return absl::NotFoundError(absl::StrCat(
      "unknown model '", name, "': the models are the server's ops (ListOps, or ModelMetadata "
      "by name) and '", kExpressionModel, "'"));
}

// A caller on this host: over loopback or a unix socket (gRPC's peer strings).
bool IsLocalPeer(absl::string_view peer) {
  return absl::StartsWith(peer, "unix:") || absl::StartsWith(peer, "ipv4:127.") ||
         absl::StartsWith(peer, "ipv6:[::1]") || absl::StartsWith(peer, "ipv6:%5B::1%5D");
}

// What a call about one model checks first: the caller's identity, then the model and its
// version.
absl::Status CheckModelCall(const ServiceEnv& env, const grpc::CallbackServerContext& ctx,
                            const std::string& name, const std::string& version) {
  if (auto id = env.auth->Identify(ctx); !id.ok()) return id.status();
  if (!KnownModel(name)) return UnknownModel(name);
  return CheckVersion(name, version);
}

// The metrics' op label: the model's name where it is one (a client's arbitrary strings never
// become labels).
std::string ModelLabel(absl::string_view name) {
  return KnownModel(name) ? std::string(name) : std::string();
}

const char* ParameterTypeName(const inf::InferParameter& p) {
  switch (p.parameter_choice_case()) {
    case inf::InferParameter::kBoolParam: return "bool_param";
    case inf::InferParameter::kInt64Param: return "int64_param";
    case inf::InferParameter::kStringParam: return "string_param";
    case inf::InferParameter::kDoubleParam: return "double_param";
    case inf::InferParameter::kUint64Param: return "uint64_param";
    case inf::InferParameter::PARAMETER_CHOICE_NOT_SET: break;
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
absl::Status ToAttribute(const OpSpec* spec, const std::string& key,
                         const inf::InferParameter& p, v1::Attribute* out) {
  switch (p.parameter_choice_case()) {
    case inf::InferParameter::kBoolParam:
      out->set_bool_value(p.bool_param());
      return absl::OkStatus();
    case inf::InferParameter::kInt64Param:
      out->set_int_value(p.int64_param());
      return absl::OkStatus();
    case inf::InferParameter::kDoubleParam:
      out->set_float_value(p.double_param());
      return absl::OkStatus();
    case inf::InferParameter::kUint64Param:
      if (p.uint64_param() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter '", key, "': ", p.uint64_param(), " is out of range"));
      }
      out->set_int_value(static_cast<int64_t>(p.uint64_param()));
      return absl::OkStatus();
    case inf::InferParameter::kStringParam: {
      // A dtype attribute takes a dtype's name, ours ("float16") or the protocol's ("FP16").
      const AttrSpec* a = spec != nullptr ? FindAttr(*spec, key) : nullptr;
      if (a != nullptr && a->type == AttrType::kDType) {
        std::optional<DType> t = DTypeFromName(p.string_param());
        if (!t) t = DTypeFromV2(p.string_param());
        if (!t) {
          return absl::InvalidArgumentError(absl::StrCat(
              "parameter '", key, "': '", p.string_param(), "' is not a datatype"));
        }
        out->set_dtype_value(DTypeToProto(*t));
        return absl::OkStatus();
      }
      out->set_string_value(p.string_param());
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
  return absl::InvalidArgumentError(absl::StrCat(what, ": parameter '", key,
                                                 "' must be an int64_param, got ",
                                                 ParameterTypeName(p)));
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
        return absl::InvalidArgumentError(absl::StrCat(what, ": parameter '", key, "' is negative"));
      }
      if (key == "shared_memory_offset") {
        shm.offset = *v;
        offset_given = true;
      } else {
        shm.bytes = *v;
      }
    } else if (absl::StartsWith(key, "shared_memory_")) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": parameter '", key, "' is not one of shared_memory_region, "
                             "shared_memory_offset, shared_memory_byte_size"));
    } else if (key == "classification") {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": classification outputs are not served: the ops' outputs are "
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

absl::StatusOr<SharedRegion> FindRegion(const ShmLookup& shm, const std::string& name) {
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

// The datatype ModelMetadata gives an op's input: float32 where the op takes it, else the
// first it takes; a condition's bool.
DType MetadataInputType(const CatalogEntry& op, int i) {
  if (i == op.spec.condition_input) return DType::kBool;
  if (Accepts(op.spec, DType::kFloat32)) return DType::kFloat32;
  const std::vector<DType> accepted = DTypesIn(op.spec.dtypes);
  return accepted.empty() ? DType::kFloat32 : accepted.front();
}

// An op's inputs as ModelMetadata and ModelConfig give them: INPUTi and its datatype.
std::vector<std::pair<std::string, DType>> ModelInputs(const CatalogEntry& op) {
  std::vector<std::pair<std::string, DType>> inputs;
  for (int i = 0; i < op.spec.arity; ++i) inputs.emplace_back(InputName(i), MetadataInputType(op, i));
  return inputs;
}

// The output's datatype for inputs of those types, by the typing rules every request goes
// through (promotion, bool comparisons, casts: expr::TypeCheck on the one call), float32
// where there is no telling without attributes (an expression, an op with a required one).
DType MetadataOutputType(absl::string_view name) {
  const CatalogEntry* op = FindOp(name);
  if (op == nullptr) return DType::kFloat32;
  expr::Expression call;
  expr::Node node;
  node.kind = expr::NodeKind::kCall;
  node.op = op;
  std::vector<TypeOperand> inputs;
  for (int i = 0; i < op->spec.arity; ++i) {
    expr::Node input;
    input.kind = expr::NodeKind::kInput;
    input.input = i;
    call.nodes.push_back(input);
    node.args.push_back(i);
    inputs.push_back({MetadataInputType(*op, i), TypeTier::kDimensioned});
  }
  call.nodes.push_back(node);
  auto types = expr::TypeCheck(call, inputs);
  return types.ok() ? types->back().dtype : DType::kFloat32;
}

}  // namespace

const char* V2DatatypeName(DType t) {
  switch (t) {
    case DType::kBool: return "BOOL";
    case DType::kUInt8: return "UINT8";
    case DType::kInt8: return "INT8";
    case DType::kInt16: return "INT16";
    case DType::kInt32: return "INT32";
    case DType::kInt64: return "INT64";
    case DType::kFloat16: return "FP16";
    case DType::kBFloat16: return "BF16";
    case DType::kFloat32: return "FP32";
    case DType::kFloat64: return "FP64";
  }
  return "UNKNOWN";
}

std::optional<DType> DTypeFromV2(absl::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType t = static_cast<DType>(i);
    if (name == V2DatatypeName(t)) return t;
  }
  return std::nullopt;
}

absl::Status ToComputeRequest(inf::ModelInferRequest& request, const ServiceOptions& options,
                              const ShmLookup& shm, ShmReadBudget* budget,
                              v1::ComputeRequest* out, std::optional<ShmTarget>* output_shm) {
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
    return absl::InvalidArgumentError(absl::StrCat("model '", model, "' takes ",
                                                   AritiesOf(model), ", got ", n));
  }

  if (expression && n > kMaxExprInputs) {
    return absl::InvalidArgumentError(absl::StrCat("an expression takes at most ",
                                                   kMaxExprInputs, " inputs, got ", n));
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
        return absl::InvalidArgumentError(absl::StrCat("model '", model, "' has no input '",
                                                       name, "'; its inputs are ",
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
  if (expression) {
    out->set_op("");
  } else {
    out->set_op(model);
  }
  for (int i = 0; i < n; ++i) out->add_inputs();
  for (int i = 0; i < n; ++i) {
    inf::ModelInferRequest::InferInputTensor& in = *request.mutable_inputs(i);
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
    v1::Tensor* tensor = out->mutable_inputs(slot[i]);
    tensor->set_dtype(DTypeToProto(*t));
    tensor->mutable_shape()->CopyFrom(in.shape());
    const int64_t bytes = *count * ItemSize(*t);
    if (!params->region.empty()) {
      if (in.has_contents()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": contents and shared_memory_region are not taken together"));
      }
      if (params->bytes != bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": shape [", absl::StrJoin(in.shape(), ","), "] of ", in.datatype(), " is ",
            bytes, " bytes, shared_memory_byte_size says ", params->bytes));
      }
      auto region = FindRegion(shm, params->region);
      if (!region.ok()) return region.status();
      if (region->system != nullptr) {
        if (bytes > options.max_request_bytes - copied) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "the inputs in shared memory come to more than this server's limit of ",
              options.max_request_bytes, " bytes for one request"));
        }
        copied += bytes;
        if (budget == nullptr || !budget->reserve) {
          return absl::InternalError("no budget for reading shared memory");
        }
        auto reserved = budget->reserve(bytes);
        if (!reserved.ok()) {
          return absl::Status(reserved.status().code(),
                              absl::StrCat(what, " in shared memory: ",
                                           reserved.status().message()));
        }
        budget->held.push_back(*std::move(reserved));
        if (absl::Status s = region->system->Read(params->offset, bytes, tensor->mutable_data());
            !s.ok()) {
          return s;
        }
      } else {
        // GPU memory: the engine reads it where it lies (range and alignment checked there).
        tensor->set_region(region->cuda->id);
        tensor->set_region_offset(params->offset);
        tensor->set_storage_bytes(bytes);
      }
    } else if (raw) {
      if (in.has_contents()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": contents and raw_input_contents are not taken together"));
      }
      if (next_raw >= request.raw_input_contents_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "raw_input_contents has ", request.raw_input_contents_size(),
            " entries: one is needed per input not in shared memory, in input order"));
      }
      std::string* data = request.mutable_raw_input_contents(next_raw);
      if (static_cast<int64_t>(data->size()) != bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": shape [", absl::StrJoin(in.shape(), ","), "] of ", in.datatype(), " is ",
            bytes, " bytes, raw_input_contents[", next_raw, "] has ", data->size()));
      }
      ++next_raw;
      tensor->mutable_data()->swap(*data);
    } else if (absl::Status s = ContentsToBytes(in.contents(), *t, *count, what,
                                                tensor->mutable_data());
               !s.ok()) {
      return s;
    }
    if (expression) out->add_input_names(in.name());
  }
  if (raw && next_raw != request.raw_input_contents_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_input_contents has ", request.raw_input_contents_size(), " entries for ", next_raw,
        " inputs not in shared memory: one per such input, in input order"));
  }

  for (const auto& [key, p] : request.parameters()) {
    if (IsSchedulingParameter(key)) continue;
    if (expression && key == kExpressionParameter) {
      if (p.parameter_choice_case() != inf::InferParameter::kStringParam) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", key, "' must be a string_param, got ", ParameterTypeName(p)));
      }
      out->set_expression(p.string_param());
      continue;
    }
    v1::Attribute attr;
    if (absl::Status s = ToAttribute(op != nullptr ? &op->spec : nullptr, key, p, &attr);
        !s.ok()) {
      return s;
    }
    (*out->mutable_attributes())[key] = std::move(attr);
  }
  if (expression && out->expression().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("model '", kExpressionModel,
                                                   "' needs the request parameter '",
                                                   kExpressionParameter, "' (a string_param)"));
  }

  if (request.outputs_size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("output '", kOutputName, "' is requested ", request.outputs_size(),
                     " times; model '", model, "' has that one output"));
  }
  for (const auto& requested : request.outputs()) {
    if (requested.name() != kOutputName) {
      return absl::InvalidArgumentError(absl::StrCat("model '", model, "' has no output '",
                                                     requested.name(), "'; its output is ",
                                                     kOutputName));
    }
    auto params = TensorParameters(requested.parameters(),
                                   absl::StrCat("output '", requested.name(), "'"));
    if (!params.ok()) return params.status();
    if (!params->region.empty()) {
      auto region = FindRegion(shm, params->region);
      if (!region.ok()) return region.status();
      if (region->cuda != nullptr) {
        out->set_output_region(region->cuda->id);
        out->set_output_region_offset(params->offset);
      }
      *output_shm = ShmTarget{*std::move(region), params->offset, params->bytes};
    }
  }
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

absl::Status ToInferResponse(const inf::ModelInferRequest& request, v1::ComputeResponse& result,
                             const std::optional<ShmTarget>& output_shm,
                             inf::ModelInferResponse* out) {
  v1::Tensor& t = *result.mutable_output();
  auto dtype = DTypeFromProto(t.dtype());
  if (!dtype.ok()) return absl::InternalError(dtype.status().message());
  int64_t n = 1;
  for (int64_t d : t.shape()) n *= d;
  const bool in_region = !t.region().empty();
  if ((!in_region && static_cast<int64_t>(t.data().size()) != n * ItemSize(*dtype)) ||
      t.offset() != 0) {
    return absl::InternalError("the result is not a dense tensor");
  }
  out->set_model_name(request.model_name());
  out->set_model_version(kVersion);
  out->set_id(request.id());
  inf::ModelInferResponse::InferOutputTensor* o = out->add_outputs();
  o->set_name(kOutputName);
  o->set_datatype(V2DatatypeName(*dtype));
  o->mutable_shape()->CopyFrom(t.shape());
  if (output_shm) {
    // (Written in place for GPU memory before its size could be compared: the bytes past
    // shared_memory_byte_size are still the caller's registered region.)
    const int64_t bytes = n * ItemSize(*dtype);
    if (bytes > output_shm->bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output '", kOutputName, "' is ", bytes, " bytes, shared_memory_byte_size gives ",
          output_shm->bytes));
    }
    if (output_shm->region.system != nullptr) {
      if (absl::Status s = output_shm->region.system->Write(output_shm->offset, t.data());
          !s.ok()) {
        return s;
      }
    }
    out->add_raw_output_contents();
    return absl::OkStatus();
  }
  out->add_raw_output_contents()->swap(*t.mutable_data());
  return absl::OkStatus();
}

InferenceServiceImpl::InferenceServiceImpl(ServiceEnv env, MappedBytes* system_shm)
    : env_(std::move(env)) {
  if (system_shm != nullptr) {
    const int max = env_.regions != nullptr ? env_.regions->options().max_regions : 256;
    shm_ = std::make_unique<SystemShmStore>(max, system_shm);
  }
}

namespace {

// Bytes read out of system shared memory count against the least loaded device's budget
// (the device the request will most likely run on).
ShmReadBudget ReadBudget(const ServiceEnv& env) {
  ShmReadBudget b;
  runtime::DeviceSet* devices = env.devices;
  b.reserve = [devices](int64_t bytes) {
    return devices->LeastLoaded().Reserve(bytes, absl::InfiniteFuture());
  };
  return b;
}

}  // namespace

ShmLookup InferenceServiceImpl::LookupFor(const std::string& owner) const {
  if (shm_ == nullptr && env_.regions == nullptr) return nullptr;
  return [this, owner](const std::string& name) -> absl::StatusOr<SharedRegion> {
    if (shm_ != nullptr) {
      if (auto r = shm_->Find(owner, name); r.ok()) return SharedRegion{*std::move(r), nullptr};
    }
    std::vector<std::shared_ptr<Region>> cuda = CudaRegions(owner, name);
    if (!cuda.empty()) return SharedRegion{nullptr, cuda.front()};
    return absl::NotFoundError(absl::StrCat(
        "no shared-memory region named '", name,
        "' is registered (SystemSharedMemoryRegister, CudaSharedMemoryRegister)",
        shm_ == nullptr ? "; system shared memory is off on this server (--system_shared_memory)"
                        : ""));
  };
}

absl::StatusOr<std::string> InferenceServiceImpl::SystemShmCaller(
    const grpc::CallbackServerContext& ctx) const {
  auto id = env_.auth->Identify(ctx);
  if (id.ok() && shm_ == nullptr) {
    return absl::FailedPreconditionError(
        "system shared memory is off on this server (start it with --system_shared_memory); "
        "tensorcompute.v1 takes sealed memfd regions and CUDA IPC memory");
  }
  return id;
}

absl::StatusOr<std::vector<std::shared_ptr<Region>>> InferenceServiceImpl::NamedCudaRegions(
    const std::string& owner, const std::string& name) const {
  std::vector<std::shared_ptr<Region>> regions = CudaRegions(owner, name);
  if (!name.empty() && regions.empty()) {
    return absl::NotFoundError(absl::StrCat("no CUDA shared-memory region named '", name, "'"));
  }
  return regions;
}

std::vector<std::shared_ptr<Region>> InferenceServiceImpl::CudaRegions(
    const std::string& owner, const std::string& name) const {
  std::vector<std::shared_ptr<Region>> out;
  if (env_.regions == nullptr) return out;
  for (std::shared_ptr<Region>& r : env_.regions->List(owner)) {
    if (r->connection == RegionStore::kNoConnection && r->device != nullptr &&
        (name.empty() || r->name == name)) {
      out.push_back(std::move(r));
    }
  }
  return out;
}

bool InferenceServiceImpl::Ready() const {
  return !env_.life->draining() && env_.devices->usable() > 0;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ServerLive(grpc::CallbackServerContext* ctx,
                                                           const inf::ServerLiveRequest*,
                                                           inf::ServerLiveResponse* response) {
  // Like the standard health service's server-wide status (the liveness probe): false once a
  // device has failed, since only a restart brings it back; no token needed.
  response->set_live(env_.devices->usable() == env_.devices->size());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ServerReady(grpc::CallbackServerContext* ctx,
                                                            const inf::ServerReadyRequest*,
                                                            inf::ServerReadyResponse* response) {
  response->set_ready(Ready());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelReady(grpc::CallbackServerContext* ctx,
                                                           const inf::ModelReadyRequest* request,
                                                           inf::ModelReadyResponse* response) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "ModelReady", ModelLabel(request->name())};
  if (!call.Admit()) return call.reactor;
  if (auto id = env_.auth->Identify(*ctx); !id.ok()) {
    call.Finish(id.status());
    return call.reactor;
  }
  // An unknown model or version is not ready, not an error.
  response->set_ready(KnownModel(request->name()) &&
                      CheckVersion(request->name(), request->version()).ok() && Ready());
  call.Finish(absl::OkStatus());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ServerMetadata(
    grpc::CallbackServerContext* ctx, const inf::ServerMetadataRequest*,
    inf::ServerMetadataResponse* response) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "ServerMetadata", ""};
  if (!call.Admit()) return call.reactor;
  if (auto id = env_.auth->Identify(*ctx); !id.ok()) {
    call.Finish(id.status());
    return call.reactor;
  }
  response->set_name("tensorcompute");
  response->set_version(TC_VERSION);
  // Request parameters carry the ops' attributes.
  response->add_extensions("parameters");
  response->add_extensions("model_configuration");
  if (shm_ != nullptr) response->add_extensions("system_shared_memory");
  bool gpu = false;
  for (int i = 0; i < env_.devices->size(); ++i) gpu = gpu || !env_.devices->at(i).host_memory();
  if (gpu && env_.regions != nullptr) response->add_extensions("cuda_shared_memory");
  call.Finish(absl::OkStatus());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelMetadata(
    grpc::CallbackServerContext* ctx, const inf::ModelMetadataRequest* request,
    inf::ModelMetadataResponse* response) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "ModelMetadata", ModelLabel(request->name())};
  if (!call.Admit()) return call.reactor;
  const std::string& name = request->name();
  if (absl::Status s = CheckModelCall(env_, *ctx, name, request->version()); !s.ok()) {
    call.Finish(s);
    return call.reactor;
  }
  response->set_name(name);
  response->add_versions(kVersion);
  response->set_platform("tensorcompute");
  // Shapes are any size at any rank (inputs broadcast together); the datatype given is the
  // one a generated request should use: float32 where the op takes it, a condition's bool.
  // An expression's inputs are its variables, named by the caller.
  if (const CatalogEntry* op = FindOp(name); op != nullptr) {
    for (const auto& [input, type] : ModelInputs(*op)) {
      auto* in = response->add_inputs();
      in->set_name(input);
      in->set_datatype(V2DatatypeName(type));
      in->add_shape(-1);
    }
  }
  auto* out = response->add_outputs();
  out->set_name(kOutputName);
  out->set_datatype(V2DatatypeName(MetadataOutputType(name)));
  out->add_shape(-1);
  call.Finish(absl::OkStatus());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelConfig(
    grpc::CallbackServerContext* ctx, const inf::ModelConfigRequest* request,
    inf::ModelConfigResponse* response) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "ModelConfig", ModelLabel(request->name())};
  if (!call.Admit()) return call.reactor;
  const std::string& name = request->name();
  if (absl::Status s = CheckModelCall(env_, *ctx, name, request->version()); !s.ok()) {
    call.Finish(s);
    return call.reactor;
  }
  // The same inputs and output as ModelMetadata, in the configuration's terms.
  const auto type_of = [](DType t) {
    inf::DataType type = inf::TYPE_INVALID;
    inf::DataType_Parse(absl::StrCat("TYPE_", V2DatatypeName(t)), &type);
    return type;
  };
  inf::ModelConfig* config = response->mutable_config();
  config->set_name(name);
  config->set_platform("tensorcompute");
  config->set_backend("tensorcompute");
  config->set_max_batch_size(0);
  config->mutable_model_transaction_policy()->set_decoupled(false);
  if (const CatalogEntry* op = FindOp(name); op != nullptr) {
    for (const auto& [input, type] : ModelInputs(*op)) {
      inf::ModelInput* in = config->add_input();
      in->set_name(input);
      in->set_data_type(type_of(type));
      in->add_dims(-1);
    }
  }
  inf::ModelOutput* out = config->add_output();
  out->set_name(kOutputName);
  out->set_data_type(type_of(MetadataOutputType(name)));
  out->add_dims(-1);
  call.Finish(absl::OkStatus());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelInfer(grpc::CallbackServerContext* ctx,
                                                           const inf::ModelInferRequest* request,
                                                           inf::ModelInferResponse* response) {
  auto call = std::make_shared<UnaryCall>(UnaryCall{&env_, ctx->DefaultReactor(), "ModelInfer",
                                                    ModelLabel(request->model_name())});
  grpc::ServerUnaryReactor* reactor = call->reactor;
  if (!call->Admit()) return reactor;
  struct State {
    v1::ComputeRequest request;
    v1::ComputeResponse result;
    std::optional<ShmTarget> output_shm;
    ShmReadBudget budget;
  };
  auto state = std::make_shared<State>();
  state->budget = ReadBudget(env_);
  // Shared-memory regions belong to the caller's identity, and moving their bytes is work for
  // the request pool, not a gRPC thread.
  const bool shm = UsesSharedMemory(*request);
  ShmLookup lookup;
  if (shm) {
    auto id = env_.auth->Identify(*ctx);
    if (!id.ok()) {
      call->Finish(id.status());
      return reactor;
    }
    lookup = LookupFor(*id);
  }
  const ServiceEnv* env = &env_;
  call->complete = [env, state, request, response, reactor](const absl::Status& s) {
    const auto finish = [state, request, response, reactor](absl::Status out) {
      if (out.ok()) out = ToInferResponse(*request, state->result, state->output_shm, response);
      reactor->Finish(ToGrpcStatus(out));
    };
    // Writing the output into system shared memory is work for the request pool, not for a
    // device's completion thread; the drain counts it until the reply is out.
    if (s.ok() && state->output_shm && state->output_shm->region.system != nullptr &&
        env->life->Enter()) {
      env->pool->Schedule([env, finish] {
        finish(absl::OkStatus());
        env->life->Leave();
      });
      return;
    }
    finish(s);
  };
  auto start = [env, ctx, request, state, call, lookup] {
    // The request is this call's until it finishes, and nothing reads its raw inputs after
    // this: their bytes move into the Compute request instead of being copied.
    auto& mutable_request = const_cast<inf::ModelInferRequest&>(*request);
    if (absl::Status s = ToComputeRequest(mutable_request, env->options, lookup,
                                          &state->budget, &state->request, &state->output_shm);
        !s.ok()) {
      call->Finish(s);
      return;
    }
    StartCompute(*env, ctx, &state->request, &state->result, call);
  };
  if (shm) {
    env_.pool->Schedule(std::move(start));
  } else {
    start();
  }
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* ctx, const inf::SystemSharedMemoryRegisterRequest* request,
    inf::SystemSharedMemoryRegisterResponse*) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "SystemSharedMemoryRegister", ""};
  if (!call.Admit()) return call.reactor;
  auto id = SystemShmCaller(*ctx);
  if (!id.ok()) {
    call.Finish(id.status());
  } else if (!IsLocalPeer(ctx->peer())) {
    call.Finish(absl::PermissionDeniedError(
        "system shared memory is registered from this host only (a loopback address or the "
        "server's unix socket)"));
  } else if (request->offset() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
             request->byte_size() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    call.Finish(absl::InvalidArgumentError("offset or byte_size out of range"));
  } else if (!request->name().empty() && !CudaRegions(*id, request->name()).empty()) {
    call.Finish(absl::AlreadyExistsError(absl::StrCat(
        "a shared-memory region named '", request->name(), "' is already registered")));
  } else {
    call.Finish(shm_->Register(*id, request->name(), request->key(),
                               static_cast<int64_t>(request->offset()),
                               static_cast<int64_t>(request->byte_size())));
  }
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::CudaSharedMemoryRegister(
    grpc::CallbackServerContext* ctx, const inf::CudaSharedMemoryRegisterRequest* request,
    inf::CudaSharedMemoryRegisterResponse*) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "CudaSharedMemoryRegister", ""};
  if (!call.Admit()) return call.reactor;
  auto id = env_.auth->Identify(*ctx);
  if (!id.ok()) {
    call.Finish(id.status());
    return call.reactor;
  }
  const std::string& name = request->name();
  runtime::Device* device = nullptr;
  for (int i = 0; i < env_.devices->size(); ++i) {
    const runtime::DeviceInfo& info = env_.devices->at(i).info();
    if (info.kind == "cuda" && info.index == request->device_id()) device = &env_.devices->at(i);
  }
  absl::Status refused;
  if (env_.regions == nullptr) {
    refused = absl::FailedPreconditionError(
        "shared-memory regions are off on this server (--region_socket=off)");
  } else if (device == nullptr) {
    refused = absl::InvalidArgumentError(absl::StrCat(
        "this server has no GPU with device_id ", request->device_id(),
        " (ServerInfo of tensorcompute.v1 lists its devices)"));
  } else if (name.empty()) {
    refused = absl::InvalidArgumentError("a shared-memory region needs a name");
  } else if (request->byte_size() == 0 ||
             request->byte_size() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    refused = absl::InvalidArgumentError("byte_size must be positive");
  } else if (!CudaRegions(*id, name).empty() || (shm_ != nullptr && shm_->Find(*id, name).ok())) {
    refused = absl::AlreadyExistsError(
        absl::StrCat("a shared-memory region named '", name, "' is already registered"));
  } else if (device->failed()) {
    refused = device->health();
  }
  if (!refused.ok()) {
    call.Finish(refused);
    return call.reactor;
  }
  auto opened = device->OpenIpc(request->raw_handle());
  if (!opened.ok()) {
    call.Finish(absl::InvalidArgumentError(
        absl::StrCat("the CUDA IPC handle cannot be opened: ", opened.status().message())));
    return call.reactor;
  }
  const int64_t bytes = static_cast<int64_t>(request->byte_size());
  if (bytes > opened->bytes) {
    call.Finish(absl::InvalidArgumentError(absl::StrCat(
        "byte_size ", bytes, " is past the end of the allocation (", opened->bytes, " bytes)")));
    return call.reactor;
  }
  // The whole allocation is open, so the whole of it counts.
  auto charge = env_.regions->mapped()->Charge(opened->bytes, "the CUDA shared memory");
  if (!charge.ok()) {
    call.Finish(charge.status());
    return call.reactor;
  }
  auto region = env_.regions->Adopt(
      *id, name,
      std::make_shared<Region>(opened->data, bytes, /*writable=*/true,
                               RegionStore::kNoConnection, std::move(opened->closer), device,
                               *std::move(charge)));
  call.Finish(region.status());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::CudaSharedMemoryUnregister(
    grpc::CallbackServerContext* ctx, const inf::CudaSharedMemoryUnregisterRequest* request,
    inf::CudaSharedMemoryUnregisterResponse*) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "CudaSharedMemoryUnregister", ""};
  if (!call.Admit()) return call.reactor;
  auto id = env_.auth->Identify(*ctx);
  auto found = id.ok() ? NamedCudaRegions(*id, request->name())
                       : absl::StatusOr<std::vector<std::shared_ptr<Region>>>(id.status());
  if (!found.ok()) {
    call.Finish(found.status());
    return call.reactor;
  }
  const std::vector<std::shared_ptr<Region>>& regions = *found;
  // Requests using a region keep its memory open until they finish.
  for (const auto& r : regions) (void)env_.regions->Unregister(*id, r->id);
  call.Finish(absl::OkStatus());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::CudaSharedMemoryStatus(
    grpc::CallbackServerContext* ctx, const inf::CudaSharedMemoryStatusRequest* request,
    inf::CudaSharedMemoryStatusResponse* response) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "CudaSharedMemoryStatus", ""};
  if (!call.Admit()) return call.reactor;
  auto id = env_.auth->Identify(*ctx);
  auto found = id.ok() ? NamedCudaRegions(*id, request->name())
                       : absl::StatusOr<std::vector<std::shared_ptr<Region>>>(id.status());
  if (!found.ok()) {
    call.Finish(found.status());
    return call.reactor;
  }
  const std::vector<std::shared_ptr<Region>>& regions = *found;
  for (const auto& r : regions) {
    auto& status = (*response->mutable_regions())[r->name];
    status.set_name(r->name);
    status.set_device_id(static_cast<uint64_t>(r->device->info().index));
    status.set_byte_size(static_cast<uint64_t>(r->bytes));
  }
  call.Finish(absl::OkStatus());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* ctx, const inf::SystemSharedMemoryUnregisterRequest* request,
    inf::SystemSharedMemoryUnregisterResponse*) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "SystemSharedMemoryUnregister", ""};
  if (!call.Admit()) return call.reactor;
  auto id = SystemShmCaller(*ctx);
  call.Finish(id.ok() ? shm_->Unregister(*id, request->name()) : id.status());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* ctx, const inf::SystemSharedMemoryStatusRequest* request,
    inf::SystemSharedMemoryStatusResponse* response) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "SystemSharedMemoryStatus", ""};
  if (!call.Admit()) return call.reactor;
  auto id = SystemShmCaller(*ctx);
  if (!id.ok()) {
    call.Finish(id.status());
    return call.reactor;
  }
  auto regions = shm_->List(*id, request->name());
  if (!regions.ok()) {
    call.Finish(regions.status());
    return call.reactor;
  }
  for (const auto& r : *regions) {
    auto& status = (*response->mutable_regions())[r->name];
    status.set_name(r->name);
    status.set_key(r->key);
    status.set_offset(static_cast<uint64_t>(r->offset));
    status.set_byte_size(static_cast<uint64_t>(r->bytes));
  }
  call.Finish(absl::OkStatus());
  return call.reactor;
}

namespace {

// ModelStreamInfer: requests one at a time, each answered before the next is read; a request
// that fails is answered with its error_message (and its id) and the stream goes on.
class StreamInferReactor final
    : public grpc::ServerBidiReactor<inf::ModelInferRequest, inf::ModelStreamInferResponse> {
 public:
  StreamInferReactor(const ServiceEnv* env, const InferenceServiceImpl* service,
                     grpc::CallbackServerContext* ctx)
      : env_(env), ctx_(ctx) {
    if (!env_->life->Enter()) {
      Finish(ToGrpcStatus(ShuttingDown()));
      return;
    }
    entered_ = true;
    auto id = env_->auth->Identify(*ctx_);
    if (!id.ok()) {
      Finish(ToGrpcStatus(id.status()));
      return;
    }
    lookup_ = service->LookupFor(*id);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client is done sending
      Finish(grpc::Status::OK);
      return;
    }
    if (env_->life->draining()) {
      Finish(ToGrpcStatus(ShuttingDown()));
      return;
    }
    auto call = std::make_shared<UnaryCall>(
        UnaryCall{env_, nullptr, "ModelStreamInfer", ModelLabel(request_.model_name())});
    // The last request's bytes go, and with them what they counted against the budget.
    compute_ = v1::ComputeRequest();
    result_ = v1::ComputeResponse();
    budget_ = ReadBudget(*env_);
    // Reading and writing shared memory is work for the request pool, as in ModelInfer (the
    // stream has nothing else in flight meanwhile).
    if (UsesSharedMemory(request_)) {
      env_->pool->Schedule([this, call] { Run(call); });
    } else {
      Run(call);
    }
  }

  void Run(std::shared_ptr<UnaryCall> call) {
    call->complete = [this](const absl::Status& s) {
      if (s.ok() && output_shm_ && output_shm_->region.system != nullptr) {
        env_->pool->Schedule([this] { Respond(absl::OkStatus()); });
      } else {
        Respond(s);
      }
    };
    if (absl::Status s =
            ToComputeRequest(request_, env_->options, lookup_, &budget_, &compute_, &output_shm_);
        !s.ok()) {
      call->Finish(s);
      return;
    }
    StartCompute(*env_, ctx_, &compute_, &result_, std::move(call));
  }

  // The result (or the error) as this request's response.
  void Respond(absl::Status out) {
    response_.Clear();
    if (out.ok()) {
      out = ToInferResponse(request_, result_, output_shm_, response_.mutable_infer_response());
    }
    if (!out.ok()) {
      response_.Clear();
      response_.set_error_message(std::string(out.message()));
      response_.mutable_infer_response()->set_id(request_.id());
    }
    // Each request has this one response, its last, as Triton says of its own responses
    // (clients asking for enable_empty_final_response wait for it).
    (*response_.mutable_infer_response()->mutable_parameters())["triton_final_response"]
        .set_bool_param(true);
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the response could not be written"));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override {
    if (entered_) env_->life->Leave();
    delete this;
  }

 private:
  const ServiceEnv* env_;
  grpc::CallbackServerContext* ctx_;
  bool entered_ = false;
  ShmLookup lookup_;
  inf::ModelInferRequest request_;
  v1::ComputeRequest compute_;
  std::optional<ShmTarget> output_shm_;
  ShmReadBudget budget_;
  v1::ComputeResponse result_;
  inf::ModelStreamInferResponse response_;
};

}  // namespace

grpc::ServerBidiReactor<inf::ModelInferRequest, inf::ModelStreamInferResponse>*
InferenceServiceImpl::ModelStreamInfer(grpc::CallbackServerContext* ctx) {
  return new StreamInferReactor(&env_, this, ctx);
}

}  // namespace tc::server
