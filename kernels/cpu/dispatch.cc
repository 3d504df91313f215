#include "kernels/cpu/launch_env.h"
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

}  // namespace tc::cpu
