#include "kernels/cuda/expr_steps.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tc::cuda {
namespace {

constexpr int64_t kAlign = 256;

int64_t Aligned(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Plans every step over a slab whose outermost dim is `outer` long.
absl::StatusOr<std::vector<PreparedOp>> PlanSlab(const expr::Program& program,
                                                 const expr::Steps& steps, int64_t outer) {
  const Iteration& it = program.space;
  const int nd = it.ndim;
  // Shapes and element strides in C order (outermost first): the space's dims reversed.
  DimVector shape(static_cast<size_t>(nd));
  DimVector dense(static_cast<size_t>(nd));
  int64_t step = 1;
  for (int j = 0; j < nd; ++j) {
    const size_t c = static_cast<size_t>(nd - 1 - j);
    shape[c] = j == nd - 1 ? outer : it.sizes[j];
    dense[c] = step;
    step *= shape[c];
  }
  auto strides_of = [&](int operand, DType dtype) {
    DimVector s(static_cast<size_t>(nd));
    for (int j = 0; j < nd; ++j)
      s[static_cast<size_t>(nd - 1 - j)] = it.strides[operand][j] / ItemSize(dtype);
    return s;
  };
  std::vector<PreparedOp> ops;
  for (const expr::Step& st : steps.steps) {
    TensorView views[kMaxOperands - 1];
    for (int k = 0; k < st.arity; ++k) {
      const expr::StepArg& a = st.args[k];
      TensorView& v = views[k];
      v.dtype = a.dtype;
      switch (a.kind) {
        case expr::StepArg::kInput:
          v.shape = shape;
          v.strides = strides_of(a.index + 1, a.dtype);
          break;
        case expr::StepArg::kValue:
          v.shape = shape;
          v.strides = dense;
          break;
        case expr::StepArg::kConstant:
          break;  // zero-dimensional
      }
    }
    const DimVector out_strides = st.buffer < 0 ? strides_of(0, st.out_dtype) : dense;
    auto plan =
        PlanElementwise(absl::MakeConstSpan(views, static_cast<size_t>(st.arity)), st.compute,
                        st.out_dtype, out_strides, st.op->spec.rule == TypeRule::kToBool);
    if (!plan.ok()) return plan.status();
    ops.push_back(PreparedOp::Of(st.op, st.attrs, st.result_type, *std::move(plan)));
  }
  return ops;
}

}  // namespace

std::shared_ptr<const StepRun> PrepareSteps(const expr::Program& program, char* const* base,
                                            int64_t max_scratch) {
  const Iteration& it = program.space;
  if (it.numel == 0) return nullptr;
  auto run = std::make_shared<StepRun>();
  run->steps = expr::MakeSteps(program);
  const int nd = it.ndim;
  run->outer = it.sizes[nd - 1];
  const int64_t inner = it.numel / run->outer;
  int64_t per_index = 0;  // temporaries' bytes per index of the outermost dim
  for (int64_t item : run->steps.buffer_item) per_index += item * inner;
  const int64_t constants = Aligned(static_cast<int64_t>(run->steps.constants.size()) * 8);
  if (per_index == 0) {
    run->slab = run->outer;
  } else {
    // Room for each buffer's alignment too.
    const int64_t room = max_scratch - constants - run->steps.buffers * kAlign;
    run->slab = std::min(run->outer, room > 0 ? room / per_index : 0);
    if (run->slab == 0) return nullptr;
  }
  run->slab_numel = inner * run->slab;
  run->scratch_bytes = constants;
  for (int64_t item : run->steps.buffer_item) {
    run->buffer_offset.push_back(run->scratch_bytes);
    run->scratch_bytes += Aligned(item * run->slab_numel);
  }
  for (int k = 0; k < it.num_operands; ++k) {
    run->base.push_back(base[k]);
    run->outer_stride.push_back(it.strides[k][nd - 1]);
  }
  auto whole = PlanSlab(program, run->steps, run->slab);
  if (!whole.ok()) return nullptr;
  run->whole = *std::move(whole);
  if (const int64_t rest = run->outer % run->slab; rest != 0) {
    auto last = PlanSlab(program, run->steps, rest);
    if (!last.ok()) return nullptr;
    run->last = *std::move(last);
  }
  return run;
}

absl::Status LaunchSteps(const StepRun& run, const LaunchEnv& env) {
  char* scratch = nullptr;
  if (run.scratch_bytes > 0) {
    void* p = nullptr;
    if (cudaError_t e = cudaMallocAsync(&p, static_cast<size_t>(run.scratch_bytes), env.stream);
        e != cudaSuccess) {
      (void)cudaGetLastError();
      if (e == cudaErrorMemoryAllocation) {
        return absl::ResourceExhaustedError(
            absl::StrCat("out of device memory for an expression's intermediate values (",
                         run.scratch_bytes, " bytes)"));
      }
      return absl::InternalError(absl::StrCat("cudaMallocAsync: ", cudaGetErrorString(e)));
    }
    scratch = static_cast<char*>(p);
  }
  absl::Status status;
  const std::vector<uint64_t>& constants = run.steps.constants;
  // From pageable memory: staged before the call returns, so the vector may go.
  if (!constants.empty()) {
    if (cudaError_t e = cudaMemcpyAsync(scratch, constants.data(), constants.size() * 8,
                                        cudaMemcpyHostToDevice, env.stream);
        e != cudaSuccess) {
      (void)cudaGetLastError();
      status = absl::InternalError(absl::StrCat("cudaMemcpyAsync: ", cudaGetErrorString(e)));
    }
  }
  for (int64_t start = 0; status.ok() && start < run.outer; start += run.slab) {
    const std::vector<PreparedOp>& ops = start + run.slab <= run.outer ? run.whole : run.last;
    for (size_t i = 0; status.ok() && i < ops.size(); ++i) {
      const expr::Step& st = run.steps.steps[i];
      char* operand[kMaxOperands];
      operand[0] = st.buffer < 0 ? run.base[0] + start * run.outer_stride[0]
                                 : scratch + run.buffer_offset[static_cast<size_t>(st.buffer)];
      for (int k = 0; k < st.arity; ++k) {
        const expr::StepArg& a = st.args[k];
        switch (a.kind) {
          case expr::StepArg::kInput:
            operand[k + 1] = run.base[static_cast<size_t>(a.index + 1)] +
                             start * run.outer_stride[static_cast<size_t>(a.index + 1)];
            break;
          case expr::StepArg::kValue:
            operand[k + 1] = scratch + run.buffer_offset[static_cast<size_t>(a.index)];
            break;
          case expr::StepArg::kConstant:
            operand[k + 1] = scratch + a.index * 8;
            break;
        }
      }
      status = LaunchOp(ops[i], operand, env);
    }
  }
  if (scratch != nullptr) (void)cudaFreeAsync(scratch, env.stream);
  return status;
}

}  // namespace tc::cuda
