#include "tests/support/cpu_backend.h"

#include "kernels/cpu/launch_env.h"

namespace tc {

absl::Status CpuBackend::Run(const PreparedOp& op, absl::Span<const TensorView> inputs,
                             std::byte* out) {
  cpu::LaunchEnv env{&pool_};
  env.isa = isa_;
  return cpu::Run(op, out, inputs, env);
}

}  // namespace tc
