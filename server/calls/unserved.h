// The answer to a method this server does not serve (a Triton method outside KServe v2's
// core, a typo in a method name): UNIMPLEMENTED naming the method and what is served,
// instead of gRPC's UNIMPLEMENTED without a word.
#pragma once

#include <grpcpp/generic/async_generic_service.h>

namespace tc::server {

class UnservedMethods final : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;
};

}  // namespace tc::server
