// The CPU launcher of one op: picks the compute type, runs the loops, reports division by
// zero. Instantiated per op group in ops_*.cc so that the groups compile in parallel, and
// per vector extension level (kernels/cpu/isa.h).
#pragma once

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/launch_env.h"
#include "kernels/cpu/loops.h"
#include "kernels/engine.h"
#include "kernels/ops/op_list.h"

#include "kernels/cpu/isa_begin.inc"

namespace tc::cpu {
inline namespace TC_CPU_ISA_NS {

template <typename F>
absl::Status Launch(const PreparedOp& op, char* const* base, const LaunchEnv& env) {
  F f = F::Make(MakeArgs{op.attrs, op.result_type});
  int error = 0;
  if constexpr (kHasErrorFlag<F>) f.error = &error;
  bool ran = false;
  VisitDType(op.plan.compute_dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    if constexpr ((F::kComputeTypes & DTypeBit(DTypeOf<S>())) != 0) {
      const Kernel kernel =
          Elementwise<S, F::kArity>(op.plan, base, f, *env.pool, env.stream_output);
      if (env.ran != nullptr) *env.ran = kernel;
      ran = true;
    }
  });
  if (!ran) {
    return absl::InternalError(absl::StrCat("op '", op.op->spec.name, "' has no CPU kernel for ",
                                            DTypeName(op.plan.compute_dtype)));
  }
  if (__atomic_load_n(&error, __ATOMIC_RELAXED) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("integer division by zero in '", op.op->spec.name, "'"));
  }
  return absl::OkStatus();
}

}  // namespace TC_CPU_ISA_NS
}  // namespace tc::cpu

#include "kernels/cpu/isa_end.inc"

#define TC_CPU_INSTANTIATE(F)                                                                  \
  template absl::Status tc::cpu::TC_CPU_ISA_NS::Launch<tc::F>(const PreparedOp&, char* const*, \
                                                              const LaunchEnv&);
