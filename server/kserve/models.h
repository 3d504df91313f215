// The models a KServe v2 caller sees: each op of the catalog under its own name, and
// "expression"; their one version, their inputs and output as metadata gives them, and the
// protocol's datatype names.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "kernels/catalog.h"
#include "kernels/dtype.h"
#include "server/env/service_env.h"

namespace tc::server {

// The model that runs an expression; its text is the request parameter of the same name.
inline constexpr char kExpressionModel[] = "expression";
inline constexpr char kExpressionParameter[] = "expression";
// Every model has this one version.
inline constexpr char kVersion[] = "1";
inline constexpr char kOutputName[] = "OUTPUT0";

// An op's inputs are INPUT0, INPUT1...
std::string InputName(int i);

bool KnownModel(absl::string_view name);
// NOT_FOUND unless `version` is empty or the one version.
absl::Status CheckVersion(absl::string_view model, absl::string_view version);
// NOT_FOUND naming what the models are.
absl::Status UnknownModel(absl::string_view name);

// What a call about one model checks first: the caller's identity, then the model and its
// version.
absl::Status CheckModelCall(const ServiceEnv& env, const grpc::CallbackServerContext& ctx,
                            const std::string& name, const std::string& version);

// The metrics' op label: the model's name where it is one (a client's arbitrary strings never
// become labels).
std::string ModelLabel(absl::string_view name);

// An op's inputs as ModelMetadata and ModelConfig give them: INPUTi and its datatype (float32
// where the op takes it, else the first it takes; a condition's bool).
std::vector<std::pair<std::string, DType>> ModelInputs(const CatalogEntry& op);

// The output's datatype for inputs of those types, by the typing rules every request goes
// through (promotion, bool comparisons, casts: expr::TypeCheck on the one call), float32
// where there is no telling without attributes (an expression, an op with a required one).
DType MetadataOutputType(absl::string_view name);

// The protocol's datatype name of a dtype ("FP32"), and back (nullopt for names that have no
// dtype here: UINT16-64, BYTES, and any other).
const char* V2DatatypeName(DType t);
std::optional<DType> DTypeFromV2(absl::string_view name);

}  // namespace tc::server
