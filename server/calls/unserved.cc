#include "server/calls/unserved.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace tc::server {
namespace {

class Refusal final : public grpc::ServerGenericBidiReactor {
 public:
  explicit Refusal(const std::string& method) {
    Finish(grpc::Status(
        grpc::StatusCode::UNIMPLEMENTED,
        absl::StrCat("method '", method.substr(0, 256),
                     "' is not served here: this server serves tensorcompute.v1.TensorService "
                     "and, of inference.GRPCInferenceService (KServe v2), health, metadata, "
                     "ModelConfig, ModelInfer, ModelStreamInfer, ModelStatistics, "
                     "RepositoryIndex and the shared-memory methods")));
  }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerGenericBidiReactor* UnservedMethods::CreateReactor(
    grpc::GenericCallbackServerContext* ctx) {
  return new Refusal(ctx->method());
}

}  // namespace tc::server
