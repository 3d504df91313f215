// The models and what describes them: health (ServerLive, ServerReady, ModelReady), metadata
// (ServerMetadata, ModelMetadata, ModelConfig), statistics (ModelStatistics) and the
// repository index (RepositoryIndex), as KServe v2 callers see them.
#include "server/kserve/models.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/expr/typing.h"
#include "server/calls/call.h"
#include "server/kserve/inference_service.h"

#ifndef TC_VERSION
#define TC_VERSION "unknown"
#endif

namespace tc::server {

namespace {

// The datatype ModelMetadata gives an op's input: float32 where the op takes it, else the
// first it takes; a condition's bool.
DType MetadataInputType(const CatalogEntry& op, int i) {
  if (i == op.spec.condition_input) return DType::kBool;
  if (Accepts(op.spec, DType::kFloat32)) return DType::kFloat32;
  const std::vector<DType> accepted = DTypesIn(op.spec.dtypes);
  return accepted.empty() ? DType::kFloat32 : accepted.front();
}

}  // namespace

std::string InputName(int i) { return absl::StrCat("INPUT", i); }

bool KnownModel(absl::string_view name) {
  return name == kExpressionModel || FindOp(name) != nullptr;
}

absl::Status CheckVersion(absl::string_view model, absl::string_view version) {
  if (version.empty() || version == kVersion) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("model '", model, "' has no version '", version,
                                          "'; its one version is ", kVersion));
}

absl::Status UnknownModel(absl::string_view name) {
  return absl::NotFoundError(
      absl::StrCat("unknown model '", name,
                   "': the models are the server's ops (ListOps, or ModelMetadata "
                   "by name) and '",
                   kExpressionModel, "'"));
}

absl::Status CheckModelCall(const ServiceEnv& env, const grpc::CallbackServerContext& ctx,
                            const std::string& name, const std::string& version) {
  if (auto id = env.auth->Identify(ctx); !id.ok()) return id.status();
  if (!KnownModel(name)) return UnknownModel(name);
  return CheckVersion(name, version);
}

std::string ModelLabel(absl::string_view name) {
  return KnownModel(name) ? std::string(name) : std::string();
}

std::vector<std::pair<std::string, DType>> ModelInputs(const CatalogEntry& op) {
  std::vector<std::pair<std::string, DType>> inputs;
  for (int i = 0; i < op.spec.arity; ++i)
    inputs.emplace_back(InputName(i), MetadataInputType(op, i));
  return inputs;
}

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

const char* V2DatatypeName(DType t) {
  switch (t) {
    case DType::kBool:
      return "BOOL";
    case DType::kUInt8:
      return "UINT8";
    case DType::kInt8:
      return "INT8";
    case DType::kInt16:
      return "INT16";
    case DType::kInt32:
      return "INT32";
    case DType::kInt64:
      return "INT64";
    case DType::kFloat16:
      return "FP16";
    case DType::kBFloat16:
      return "BF16";
    case DType::kFloat32:
      return "FP32";
    case DType::kFloat64:
      return "FP64";
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

bool InferenceServiceImpl::Ready() const {
  return !env_.life->draining() && env_.devices->usable() > 0;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ServerLive(grpc::CallbackServerContext* ctx,
                                                           const inf::ServerLiveRequest*,
                                                           inf::ServerLiveResponse* response) {
  // Like the standard health service's server-wide status (the liveness probe): false once a
  // device has failed that only a restart brings back; no token needed.
  response->set_live(!env_.devices->needs_restart());
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
  Call call{&env_, ctx->DefaultReactor(), "ModelReady", ModelLabel(request->name())};
  if (!call.AdmitCaller(*ctx)) return call.reactor;
  // An unknown model or version is not ready, not an error.
  response->set_ready(KnownModel(request->name()) &&
                      CheckVersion(request->name(), request->version()).ok() && Ready());
  call.Finish(absl::OkStatus());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ServerMetadata(
    grpc::CallbackServerContext* ctx, const inf::ServerMetadataRequest*,
    inf::ServerMetadataResponse* response) {
  Call call{&env_, ctx->DefaultReactor(), "ServerMetadata", ""};
  if (!call.AdmitCaller(*ctx)) return call.reactor;
  response->set_name("tensorcompute");
  response->set_version(TC_VERSION);
  // Request parameters carry the ops' attributes.
  response->add_extensions("parameters");
  response->add_extensions("model_configuration");
  response->add_extensions("statistics");
  if (system_shm_) response->add_extensions("system_shared_memory");
  bool gpu = false;
  for (int i = 0; i < env_.devices->size(); ++i) {
    gpu = gpu || env_.devices->at(i).info().kind == "cuda";
  }
  if (gpu && env_.regions != nullptr) response->add_extensions("cuda_shared_memory");
  call.Finish(absl::OkStatus());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelMetadata(
    grpc::CallbackServerContext* ctx, const inf::ModelMetadataRequest* request,
    inf::ModelMetadataResponse* response) {
  Call call{&env_, ctx->DefaultReactor(), "ModelMetadata", ModelLabel(request->name())};
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

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelConfig(grpc::CallbackServerContext* ctx,
                                                            const inf::ModelConfigRequest* request,
                                                            inf::ModelConfigResponse* response) {
  Call call{&env_, ctx->DefaultReactor(), "ModelConfig", ModelLabel(request->name())};
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

namespace {

// Every model the server serves: the catalog's ops, then the expression model.
std::vector<std::string> ServedModels() {
  std::vector<std::string> names;
  for (const CatalogEntry& op : Catalog()) {
    // An op of several arities is one model.
    if (std::find(names.begin(), names.end(), op.spec.name) == names.end()) {
      names.push_back(op.spec.name);
    }
  }
  names.push_back(kExpressionModel);
  return names;
}

void SetDuration(const ModelTotals::Duration& d, inf::StatisticDuration* out) {
  out->set_count(d.count);
  out->set_ns(d.ns);
}

}  // namespace

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelStatistics(
    grpc::CallbackServerContext* ctx, const inf::ModelStatisticsRequest* request,
    inf::ModelStatisticsResponse* response) {
  Call call{&env_, ctx->DefaultReactor(), "ModelStatistics", ModelLabel(request->name())};
  if (!call.Admit()) return call.reactor;
  const std::string& name = request->name();
  absl::Status checked = name.empty() ? env_.auth->Identify(*ctx).status()
                                      : CheckModelCall(env_, *ctx, name, request->version());
  if (checked.ok() && name.empty()) checked = CheckVersion("every model", request->version());
  if (!checked.ok()) {
    call.Finish(checked);
    return call.reactor;
  }
  const auto totals = env_.metrics->InferenceTotals();
  for (const std::string& model : name.empty() ? ServedModels() : std::vector<std::string>{name}) {
    inf::ModelStatistics* stats = response->add_model_stats();
    stats->set_name(model);
    stats->set_version(kVersion);
    const auto it = totals.find(model);
    if (it == totals.end()) {
      stats->mutable_inference_stats();
      continue;
    }
    const ModelTotals& m = it->second;
    stats->set_last_inference(m.last_inference_ms);
    // One execution a request: no batching.
    stats->set_inference_count(m.success.count);
    stats->set_execution_count(m.success.count);
    inf::InferStatistics* s = stats->mutable_inference_stats();
    SetDuration(m.success, s->mutable_success());
    SetDuration(m.fail, s->mutable_fail());
    SetDuration(m.queue, s->mutable_queue());
    SetDuration(m.compute_input, s->mutable_compute_input());
    SetDuration(m.compute_infer, s->mutable_compute_infer());
    SetDuration(m.compute_output, s->mutable_compute_output());
  }
  call.Finish(absl::OkStatus());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::RepositoryIndex(
    grpc::CallbackServerContext* ctx, const inf::RepositoryIndexRequest* request,
    inf::RepositoryIndexResponse* response) {
  Call call{&env_, ctx->DefaultReactor(), "RepositoryIndex", ""};
  if (!call.AdmitCaller(*ctx)) return call.reactor;
  if (!request->repository_name().empty()) {
    call.Finish(absl::NotFoundError(absl::StrCat(
        "unknown repository '", request->repository_name(),
        "': this server has one, its catalog of ops and the expression model (name it by the "
        "empty string)")));
    return call.reactor;
  }
  // Built in, never loaded or unloaded: READY while the server serves, UNAVAILABLE while it
  // drains or a device has failed.
  const bool ready = Ready();
  if (request->ready() && !ready) {
    call.Finish(absl::OkStatus());
    return call.reactor;
  }
  for (const std::string& model : ServedModels()) {
    auto* m = response->add_models();
    m->set_name(model);
    m->set_version(kVersion);
    m->set_state(ready ? "READY" : "UNAVAILABLE");
    if (!ready) m->set_reason("the server is draining or a device has failed");
  }
  call.Finish(absl::OkStatus());
  return call.reactor;
}

}  // namespace tc::server
