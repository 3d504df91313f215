#include "kernels/cpu/expr_eval.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/scalar_types.h"

namespace tc::cpu {
namespace {

using expr::Node;
using expr::NodeKind;
using expr::NodeType;
using expr::Program;

// Rows shorter than this are evaluated several at a time, their operands gathered into
// dense buffers; longer ones are cut into blocks evaluated in place.
constexpr int64_t kShortRow = 512;
constexpr int64_t kSlot = kExprBlock * 8;  // bytes of one buffer: kExprBlock of the widest type

// Where a call's argument comes from, block after block.
struct Arg {
  enum Kind : uint8_t { kBuffer, kInput, kConstant } kind;
  int index;  // buffer, input or constant number
};

// One call of the tree, run as its op over one block.
struct Step {
  PreparedOp op;  // a one-dim plan, resized per block
  int buffer;     // where the result goes; -1: the output
  Arg args[kMaxOperands - 1];
  int arity;
};

// Everything the blocks share, built once per run.
struct Schedule {
  std::vector<Step> steps;
  int buffers = 0;
  // A literal converted to the dtype its consumer computes it in, 8 bytes each.
  std::vector<uint64_t> constants;
  std::vector<bool> input_used;
};

// Every call of the tree takes at least one input (FoldConstants folded the others).
Schedule MakeSchedule(const Program& program) {
  const expr::Expression& e = program.expression;
  Schedule s;
  s.input_used.assign(program.input_dtypes.size(), false);
  std::vector<int> buffer_of(e.nodes.size(), -1);
  std::vector<int> free_buffers;
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const Node& n = e.nodes[i];
    if (n.kind == NodeKind::kInput) s.input_used[static_cast<size_t>(n.input)] = true;
    if (n.kind != NodeKind::kCall) continue;
    const NodeType& t = program.types[i];
    const bool root = static_cast<int>(i) == e.root();
    Step step;
    step.arity = static_cast<int>(n.args.size());
    PreparedOp& op = step.op;
    op.op = n.op;
    op.attrs = t.attrs;
    op.result_type = t.result;
    Plan& plan = op.plan;
    plan.ndim = 1;
    plan.num_operands = step.arity + 1;
    plan.compute_dtype = t.compute;
    plan.out_dtype = plan.dtypes[0] = root ? program.out_dtype : t.dtype;
    plan.path = Path::kContiguous;
    plan.kernel = Kernel::kCastRows;
    for (int k = 0; k < step.arity; ++k) {
      const int a = n.args[static_cast<size_t>(k)];
      const Node& arg = e.at(a);
      Arg& out = step.args[k];
      switch (arg.kind) {
        case NodeKind::kInput:
          out = {Arg::kInput, arg.input};
          plan.dtypes[k + 1] = program.input_dtypes[static_cast<size_t>(arg.input)];
          break;
        case NodeKind::kLiteral: {
          const DType target = expr::LiteralTarget(n, t, k);
          out = {Arg::kConstant, static_cast<int>(s.constants.size())};
          const DType d = arg.zero_dim ? *arg.zero_dim : target;
          s.constants.push_back(expr::LiteralBits(arg, d));
          plan.dtypes[k + 1] = d;
          break;
        }
        case NodeKind::kCall:
          out = Arg{Arg::kBuffer, buffer_of[static_cast<size_t>(a)]};
          plan.dtypes[k + 1] = program.types[static_cast<size_t>(a)].dtype;
          break;
      }
    }
    // The result's buffer is taken before the arguments' are given back: a node never writes
    // over what it reads.
    if (!root) {
      if (free_buffers.empty()) {
        buffer_of[i] = s.buffers++;
      } else {
        buffer_of[i] = free_buffers.back();
        free_buffers.pop_back();
      }
    }
    step.buffer = buffer_of[i];
    for (int k = 0; k < step.arity; ++k) {
      if (step.args[k].kind == Arg::kBuffer) free_buffers.push_back(step.args[k].index);
    }
    s.steps.push_back(std::move(step));
  }
  return s;
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
  const Schedule schedule = MakeSchedule(program);
  const int nops = it.num_operands;
  char* base[kMaxIterOperands];
  base[0] = reinterpret_cast<char*>(out) + it.offsets[0];
  for (int k = 1; k < nops; ++k) {
    base[k] = const_cast<char*>(reinterpret_cast<const char*>(inputs[static_cast<size_t>(k - 1)])) +
              it.offsets[k];
  }
  int64_t item[kMaxIterOperands];
  item[0] = ItemSize(program.out_dtype);
  for (int k = 1; k < nops; ++k) item[k] = ItemSize(program.input_dtypes[static_cast<size_t>(k - 1)]);
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

  env.pool->ParallelFor(items, std::max<int64_t>(1, kGrain / kExprBlock), [&](int64_t begin,
                                                                             int64_t end) {
    if (failed.load(std::memory_order_relaxed)) return;
    std::vector<Step> steps = schedule.steps;  // each thread resizes its own plans
    // Buffers for values, then one per gathered input, then the output's.
    const int64_t slots = schedule.buffers + nops;
    std::unique_ptr<char[]> storage(new char[static_cast<size_t>(slots * kSlot + 64)]);
    char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(storage.get()) + 63) & ~uintptr_t{63});
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
      for (Step& step : steps) {
        Plan& plan = step.op.plan;
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
          const Arg& a = step.args[k];
          switch (a.kind) {
            case Arg::kBuffer:
              operand[k + 1] = slot(a.index);
              plan.strides[k + 1][0] = ItemSize(plan.dtypes[k + 1]);
              break;
            case Arg::kInput:
              operand[k + 1] = ptr[a.index + 1];
              plan.strides[k + 1][0] = stride[a.index + 1];
              break;
            case Arg::kConstant:
              operand[k + 1] = const_cast<char*>(
                  reinterpret_cast<const char*>(&schedule.constants[static_cast<size_t>(a.index)]));
              plan.strides[k + 1][0] = 0;
              break;
          }
        }
        if (auto s = LaunchOp(step.op, operand, step.buffer < 0 ? root_env : inner); !s.ok()) {
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
