#include "kernels/cpu/launch_env.h"

#include <iterator>

#include "kernels/cpu/expr_eval.h"
#include "kernels/cpu/isa.h"
#include "kernels/expr/typing.h"
#include "kernels/ops/op_list.h"

namespace tc::cpu {

// Defined in launch.h, instantiated in ops_*.cc once per vector extension level (isa.h).
#define TC_DECLARE_LAUNCH(ns)                                                         \
  namespace ns {                                                                      \
  template <typename F>                                                               \
  absl::Status Launch(const PreparedOp& op, char* const* base, const LaunchEnv& env); \
  }
TC_DECLARE_LAUNCH(isa_baseline)
#if TC_CPU_ISA_VARIANTS
TC_DECLARE_LAUNCH(isa_avx2)
TC_DECLARE_LAUNCH(isa_avx512)
#endif
#undef TC_DECLARE_LAUNCH

namespace {

using Launcher = absl::Status (*)(const PreparedOp&, char* const*, const LaunchEnv&);

#define TC_LAUNCHER_TABLE(ns) \
  { TC_FOR_EACH_OP(TC_LAUNCHER_##ns) }
#define TC_LAUNCHER_isa_baseline(F) &isa_baseline::Launch<F>,
#define TC_LAUNCHER_isa_avx2(F) &isa_avx2::Launch<F>,
#define TC_LAUNCHER_isa_avx512(F) &isa_avx512::Launch<F>,

#define TC_COUNT_OP(F) +1
constexpr int kNumOps = 0 TC_FOR_EACH_OP(TC_COUNT_OP);
#undef TC_COUNT_OP

// One row per level; a level not compiled in runs the baseline.
constexpr Launcher kLaunchers[kNumIsas][kNumOps] = {
    TC_LAUNCHER_TABLE(isa_baseline),
#if TC_CPU_ISA_VARIANTS
    TC_LAUNCHER_TABLE(isa_avx2),
    TC_LAUNCHER_TABLE(isa_avx512),
#else
    TC_LAUNCHER_TABLE(isa_baseline),
    TC_LAUNCHER_TABLE(isa_baseline),
#endif
};

}  // namespace

absl::Status LaunchOp(const PreparedOp& op, char* const* base, const LaunchEnv& env) {
  static const int process_isa = static_cast<int>(ProcessIsa());
  int isa = env.isa < 0 ? process_isa : env.isa;
  if (isa >= kNumIsas || !IsaAvailable(static_cast<Isa>(isa))) isa = 0;
  return kLaunchers[isa][op.op->index](op, base, env);
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

namespace tc::expr {

absl::Status EvaluateElement(const PreparedOp& op, char* const* base) {
  // One element: the pool's workers never run (below its grain); it exists for the API.
  static ThreadPool* pool = new ThreadPool(1);
  return cpu::LaunchOp(op, base, cpu::LaunchEnv{pool});
}

}  // namespace tc::expr
