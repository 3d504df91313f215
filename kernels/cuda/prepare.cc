// The CUDA backend's entry (Prepare in launch_env.h): ops launch their compiled kernels,
// expressions the kernel generated for their program and walk, or, until it is compiled,
// their ops one by one (kernels/cuda/expr_steps.h).
#include <array>
#include <utility>

#include "kernels/cuda/expr_kernels.h"
#include "kernels/cuda/expr_steps.h"
#include "kernels/cuda/launch_env.h"
#include "kernels/rtc/codegen.h"

namespace tc::cuda {

namespace {

// The launch of an expression's compiled kernel, holding it.
ReadyLaunch Fused(std::shared_ptr<const ExprLaunch> launch,
                  std::shared_ptr<const expr::Program> program,
                  std::shared_ptr<const ExprKernel> kernel, std::string label) {
  const ExprKernel* raw = kernel.get();
  return ReadyLaunch{[launch = std::move(launch), program = std::move(program), raw](
                         const LaunchEnv& env) { return LaunchExpr(*launch, *raw, *program, env); },
                     std::move(label), std::move(kernel)};
}

}  // namespace

void Prepare(const PreparedOp& op, std::byte* out, absl::Span<const std::byte* const> inputs,
             int multiprocessors, int arch, OnReady ready) {
  if (op.expression == nullptr) {
    std::array<char*, kMaxOperands> base{};
    OperandBases(op.plan, out, inputs, base.data());
    const PreparedOp* held = &op;
    ready(ReadyLaunch{
        [held, base](const LaunchEnv& env) { return LaunchOp(*held, base.data(), env); },
        op.op->spec.name, nullptr});
    return;
  }
  const expr::Program& program = *op.expression;
  if (inputs.size() + 1 != static_cast<size_t>(program.space.num_operands)) {
    ready(absl::InternalError("an expression run with another number of inputs than planned"));
    return;
  }
  char* base[kMaxIterOperands] = {};
  base[0] = reinterpret_cast<char*>(out) + program.space.offsets[0];
  for (size_t k = 0; k < inputs.size(); ++k) {
    base[k + 1] =
        const_cast<char*>(reinterpret_cast<const char*>(inputs[k])) + program.space.offsets[k + 1];
  }
  auto launch =
      std::make_shared<const ExprLaunch>(PrepareExprLaunch(program, base, multiprocessors, arch));
  // Which op divided by zero, for the error: the flag does not say which node raised it.
  std::string label = rtc::RaisingOps(program);
  if (label.empty()) label = "expression";
  std::shared_ptr<const expr::Program> program_held = op.expression;
  ExprKernelCache& cache = ExprKernelCache::Shared();
  const StepMode mode = cache.step_mode();
  if (mode != StepMode::kNever) {
    std::shared_ptr<const ExprKernel> kernel =
        mode == StepMode::kAlways ? nullptr : cache.GetOrStart(launch->source, arch);
    if (kernel != nullptr) {
      ready(Fused(launch, program_held, std::move(kernel), std::move(label)));
      return;
    }
    if (std::shared_ptr<const StepRun> steps = PrepareSteps(program, base)) {
      cache.CountStepwise();
      ready(ReadyLaunch{[steps](const LaunchEnv& env) { return LaunchSteps(*steps, env); },
                        std::move(label), steps});
      return;
    }
  }
  cache.Get(launch->source, arch,
            [launch, program_held, label = std::move(label),
             ready = std::move(ready)](absl::StatusOr<std::shared_ptr<const ExprKernel>> kernel) {
              if (!kernel.ok()) {
                ready(kernel.status());
                return;
              }
              ready(Fused(launch, program_held, *std::move(kernel), label));
            });
}

}  // namespace tc::cuda
