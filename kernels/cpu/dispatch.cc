#include "kernels/cpu/launch_env.h"

#include <iterator>

#include "kernels/cpu/expr_eval.h"
#include "kernels/ops/op_list.h"

namespace tc::cpu {

// Defined in launch.h, instantiated in ops_*.cc.
template <typename F>
absl::Status Launch(const PreparedOp& op, char* const* base, const LaunchEnv& env);

namespace {

using Launcher = absl::Status (*)(const PreparedOp&, char* const*, const LaunchEnv&);

constexpr Launcher kLaunchers[] = {
#define TC_LAUNCHER(F) &Launch<F>,
    TC_FOR_EACH_OP(TC_LAUNCHER)
#undef TC_LAUNCHER
};

}  // namespace

absl::Status LaunchOp(const PreparedOp& op, char* const* base, const LaunchEnv& env) {
  return kLaunchers[op.op->index](op, base, env);
}

absl::Status Run(const PreparedOp& op, std::byte* out, absl::Span<const std::byte* const> inputs,
                 const LaunchEnv& env) {
  if (op.expression != nullptr) return RunExpression(*op.expression, out, inputs, env);
  char* base[kMaxOperands];
  OperandBases(op.plan, out, inputs, base);
  return LaunchOp(op, base, env);
}

absl::Status Run(const PreparedOp& op, std::byte* out, absl::Span<const TensorView> inputs,
                 const LaunchEnv& env) {
  const std::byte* data[kMaxIterOperands - 1];
  if (inputs.size() > std::size(data)) return absl::InvalidArgumentError("too many inputs");
  for (size_t k = 0; k < inputs.size(); ++k) data[k] = inputs[k].data;
  return Run(op, out, absl::MakeConstSpan(data, inputs.size()), env);
}

}  // namespace tc::cpu
