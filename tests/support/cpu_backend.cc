#include "tests/support/cpu_backend.h"

#include "kernels/cpu/launch_env.h"

namespace tc {

absl::Status CpuBackend::Run(const PreparedOp& op, absl::Span<const TensorView> inputs,
                             std::byte* out) {
  return cpu::Run(op, out, inputs, cpu::LaunchEnv{&pool_});
}

}  // namespace tc
