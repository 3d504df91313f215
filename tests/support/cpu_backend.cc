#include "tests/support/cpu_backend.h"

#include "kernels/cpu/expr_eval.h"
#include "kernels/cpu/launch_env.h"

namespace tc {

absl::Status CpuBackend::Run(const PreparedOp& op, absl::Span<const TensorView> inputs,
                             std::byte* out) {
  if (op.expression != nullptr) {
    return cpu::RunExpression(*op.expression, out, inputs, cpu::LaunchEnv{&pool_});
  }
  char* base[kMaxOperands];
  OperandBases(op.plan, out, inputs, base);
  return cpu::LaunchOp(op, base, cpu::LaunchEnv{&pool_});
}

}  // namespace tc
