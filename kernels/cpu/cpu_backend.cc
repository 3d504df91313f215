#include "kernels/cpu/cpu_backend.h"

#include "kernels/ops/op_list.h"

namespace tc {
namespace cpu {
// Defined in launch.h, instantiated in ops_*.cc.
template <typename F>
absl::Status Launch(const PreparedOp& op, char* const* base, ThreadPool& pool);
}  // namespace cpu

namespace {

using Launcher = absl::Status (*)(const PreparedOp&, char* const*, ThreadPool&);

constexpr Launcher kLaunchers[] = {
#define TC_LAUNCHER(F) &cpu::Launch<F>,
    TC_FOR_EACH_OP(TC_LAUNCHER)
#undef TC_LAUNCHER
};

}  // namespace

absl::Status CpuBackend::Run(const PreparedOp& op, absl::Span<const TensorView> inputs,
                             std::byte* out) {
  char* base[kMaxOperands] = {};
  base[0] = reinterpret_cast<char*>(out) + op.plan.offsets[0];
  for (size_t i = 0; i < inputs.size(); ++i) {
    // Inputs are only read; the loops take every operand through one pointer type.
    base[i + 1] = const_cast<char*>(reinterpret_cast<const char*>(inputs[i].data)) +
                  op.plan.offsets[i + 1];
  }
  return kLaunchers[op.op->index](op, base, pool_);
}

}  // namespace tc
