#include "kernels/cpu/expr_eval.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/expr/steps.h"
#include "kernels/scalar_types.h"

namespace tc::cpu {
namespace {

using expr::Program;

// Rows shorter than this are evaluated several at a time, their operands gathered into
// dense buffers; longer ones are cut into blocks evaluated in place.
constexpr int64_t kShortRow = 512;
constexpr int64_t kSlot = kExprBlock * 8;  // bytes of one buffer: kExprBlock of the widest type

// One step of the schedule (kernels/expr/steps.h) as its op over a block: a one-dim plan,
// resized per block.
struct BlockStep {
  PreparedOp op;
  const expr::Step* step;
};

std::vector<BlockStep> BlockSteps(const expr::Steps& steps) {
  std::vector<BlockStep> out(steps.steps.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const expr::Step& step = steps.steps[i];
    BlockStep& b = out[i];
    b.step = &step;
    DType args[kMaxOperands - 1];
    for (int k = 0; k < step.arity; ++k) args[k] = step.args[k].dtype;
    b.op = PreparedOp::Of(step.op, step.attrs, step.result_type,
                          PlanDenseRun(step.compute, step.out_dtype,
                                       absl::MakeConstSpan(args, static_cast<size_t>(step.arity))));
  }
  return out;
}

// Copies n elements of `item` bytes, `stride` bytes apart from `src`, densely into `dst`
// (ScatterRow: back).
void CopyRow(const char* src, int64_t stride, int64_t item, int64_t n, char* dst) {
  if (stride == item) {
    std::memcpy(dst, src, static_cast<size_t>(n * item));
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * item, src + i * stride, item);
}

void ScatterRow(const char* src, int64_t item, int64_t n, char* dst, int64_t stride) {
  if (stride == item) {
    std::memcpy(dst, src, static_cast<size_t>(n * item));
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * stride, src + i * item, item);
}

}  // namespace

absl::Status RunExpression(const Program& program, std::byte* out,
                           absl::Span<const std::byte* const> inputs, const LaunchEnv& env) {
  const Iteration& it = program.space;
  if (it.numel == 0) return absl::OkStatus();
  const expr::Steps schedule = expr::MakeSteps(program);
  const std::vector<BlockStep> block_steps = BlockSteps(schedule);
  const int nops = it.num_operands;
  char* base[kMaxIterOperands];
  base[0] = reinterpret_cast<char*>(out) + it.offsets[0];
  for (int k = 1; k < nops; ++k) {
    base[k] = const_cast<char*>(reinterpret_cast<const char*>(inputs[static_cast<size_t>(k - 1)])) +
              it.offsets[k];
  }
  int64_t item[kMaxIterOperands];
  item[0] = ItemSize(program.out_dtype);
  for (int k = 1; k < nops; ++k)
    item[k] = ItemSize(program.input_dtypes[static_cast<size_t>(k - 1)]);
  // An input repeated over the whole space (every stride 0) is read in place, never gathered.
  bool scalar[kMaxIterOperands] = {};
  for (int k = 1; k < nops; ++k) {
    scalar[k] = true;
    for (int d = 0; d < it.ndim; ++d) scalar[k] = scalar[k] && it.strides[k][d] == 0;
  }

  const int64_t row = it.sizes[0];
  const int64_t rows = it.numel / row;
  const bool short_rows = row < kShortRow;
  // Long rows: each cut into equal blocks. Short rows: whole rows per block.
  const int64_t per_row = short_rows ? 1 : (row + kExprBlock - 1) / kExprBlock;
  const int64_t block_len = short_rows ? row : (row + per_row - 1) / per_row;
  const int64_t rows_per_block = short_rows ? std::max<int64_t>(1, kExprBlock / row) : 1;
  const int64_t items = short_rows ? (rows + rows_per_block - 1) / rows_per_block : rows * per_row;

  std::atomic<bool> failed{false};
  std::mutex mu;
  absl::Status status;
  // Nested launches run on the calling thread: a block is far below the pool's grain. A large
  // output is streamed past the caches where the machine gains by it, as a single op's is.
  LaunchEnv inner{env.pool};
  inner.isa = env.isa;
  LaunchEnv root_env = inner;
  root_env.stream_output = !short_rows && it.numel * ItemSize(program.out_dtype) >= kStreamBytes &&
                           LargeOutputStores().streaming;

  env.pool->ParallelFor(
      items, std::max<int64_t>(1, kGrain / kExprBlock), [&](int64_t begin, int64_t end) {
        if (failed.load(std::memory_order_relaxed)) return;
        std::vector<BlockStep> steps = block_steps;  // each thread resizes its own plans
        // Buffers for values, then one per gathered input, then the output's.
        const int64_t slots = schedule.buffers + nops;
        std::unique_ptr<char[]> storage(new char[static_cast<size_t>(slots * kSlot + 64)]);
        char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(storage.get()) + 63) &
                                                ~uintptr_t{63});
        auto slot = [&](int64_t i) { return aligned + i * kSlot; };
        char* gathered = slot(schedule.buffers);  // operand k's at gathered + k * kSlot

        char* ptr[kMaxIterOperands];
        int64_t stride[kMaxIterOperands];
        for (int64_t t = begin; t < end; ++t) {
          // The block's first row and element, and its length.
          const int64_t first_row = short_rows ? t * rows_per_block : t / per_row;
          const int64_t start = short_rows ? 0 : t % per_row * block_len;
          const int64_t nrows = short_rows ? std::min(rows_per_block, rows - first_row) : 1;
          const int64_t n = short_rows ? nrows * row : std::min(block_len, row - start);
          auto row_pointers = [&](int64_t r, char** p) {
            int64_t rest = r;
            for (int k = 0; k < nops; ++k) p[k] = base[k];
            for (int d = 1; d < it.ndim; ++d) {
              const int64_t idx = rest % it.sizes[d];
              rest /= it.sizes[d];
              for (int k = 0; k < nops; ++k) p[k] += idx * it.strides[k][d];
            }
          };
          row_pointers(first_row, ptr);
          for (int k = 0; k < nops; ++k) {
            if (k > 0 && scalar[k]) {
              stride[k] = 0;
            } else if (!short_rows) {
              ptr[k] += start * it.strides[k][0];
              stride[k] = it.strides[k][0];
            } else {
              stride[k] = item[k];
            }
          }
          if (short_rows) {
            ptr[0] = gathered + 0 * kSlot;  // the output is written here, then scattered
            for (int k = 1; k < nops; ++k) {
              if (scalar[k] || !schedule.input_used[static_cast<size_t>(k - 1)]) continue;
              char* dst = gathered + k * kSlot;
              char* p[kMaxIterOperands];
              for (int64_t r = 0; r < nrows; ++r) {
                row_pointers(first_row + r, p);
                CopyRow(p[k], it.strides[k][0], item[k], row, dst + r * row * item[k]);
              }
              ptr[k] = dst;
            }
          }
          for (BlockStep& b : steps) {
            const expr::Step& step = *b.step;
            Plan& plan = b.op.plan;
            plan.sizes[0] = plan.numel = n;
            char* operand[kMaxOperands];
            if (step.buffer < 0) {
              operand[0] = ptr[0];
              plan.strides[0][0] = stride[0];
            } else {
              operand[0] = slot(step.buffer);
              plan.strides[0][0] = ItemSize(plan.dtypes[0]);
            }
            for (int k = 0; k < step.arity; ++k) {
              const expr::StepArg& a = step.args[k];
              switch (a.kind) {
                case expr::StepArg::kValue:
                  operand[k + 1] = slot(a.index);
                  plan.strides[k + 1][0] = ItemSize(plan.dtypes[k + 1]);
                  break;
                case expr::StepArg::kInput:
                  operand[k + 1] = ptr[a.index + 1];
                  plan.strides[k + 1][0] = stride[a.index + 1];
                  break;
                case expr::StepArg::kConstant:
                  operand[k + 1] = const_cast<char*>(reinterpret_cast<const char*>(
                      &schedule.constants[static_cast<size_t>(a.index)]));
                  plan.strides[k + 1][0] = 0;
                  break;
              }
            }
            if (auto s = LaunchOp(b.op, operand, step.buffer < 0 ? root_env : inner); !s.ok()) {
              std::lock_guard<std::mutex> lock(mu);
              if (status.ok()) status = s;
              failed.store(true, std::memory_order_relaxed);
              return;
            }
          }
          if (short_rows) {
            char* p[kMaxIterOperands];
            for (int64_t r = 0; r < nrows; ++r) {
              row_pointers(first_row + r, p);
              ScatterRow(ptr[0] + r * row * item[0], item[0], row, p[0], it.strides[0][0]);
            }
          }
        }
      });
  return status;
}

}  // namespace tc::cpu
