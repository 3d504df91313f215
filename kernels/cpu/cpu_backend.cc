#include "kernels/cpu/cpu_backend.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/loops.h"
#include "kernels/ops/op_list.h"

namespace tc {
namespace {

using Launcher = absl::Status (*)(const PreparedOp&, char* const*, ThreadPool&);

template <typename F>
absl::Status Launch(const PreparedOp& op, char* const* base, ThreadPool& pool) {
  const F f = F::Make(op.attrs);
  switch (op.plan.compute_dtype) {
    case DType::kFloat32:
      cpu::Elementwise<float, F::kArity>(op.plan, base, f, pool);
      return absl::OkStatus();
    default:
      return absl::UnimplementedError(absl::StrCat("op '", op.op->spec.name,
                                                   "' has no CPU kernel for ",
                                                   DTypeName(op.plan.compute_dtype)));
  }
}

constexpr Launcher kLaunchers[] = {
#define TC_LAUNCHER(F) &Launch<F>,
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
