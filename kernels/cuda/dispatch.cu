#include "kernels/cuda/launch_env.h"
#include "kernels/ops/op_list.h"

namespace tc::cuda {

// Defined in launch.cuh, instantiated in ops_*.cu.
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

}  // namespace tc::cuda
