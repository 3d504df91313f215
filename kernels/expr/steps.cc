#include "kernels/expr/steps.h"

#include <algorithm>

namespace tc::expr {

Steps MakeSteps(const Program& program) {
  const Expression& e = program.expression;
  Steps s;
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
    step.op = n.op;
    step.attrs = t.attrs;
    step.result_type = t.result;
    step.compute = t.compute;
    step.out_dtype = root ? program.out_dtype : t.dtype;
    step.arity = static_cast<int>(n.args.size());
    for (int k = 0; k < step.arity; ++k) {
      const int a = n.args[static_cast<size_t>(k)];
      const Node& arg = e.at(a);
      StepArg& out = step.args[k];
      switch (arg.kind) {
        case NodeKind::kInput:
          out = {StepArg::kInput, arg.input, program.input_dtypes[static_cast<size_t>(arg.input)]};
          break;
        case NodeKind::kLiteral: {
          const DType d = arg.zero_dim ? *arg.zero_dim : LiteralTarget(n, t, k);
          out = {StepArg::kConstant, static_cast<int>(s.constants.size()), d};
          s.constants.push_back(LiteralBits(arg, d));
          break;
        }
        case NodeKind::kCall:
          out = {StepArg::kValue, buffer_of[static_cast<size_t>(a)],
                 program.types[static_cast<size_t>(a)].dtype};
          break;
      }
    }
    // The result's buffer is taken before the arguments' are given back: a step never writes
    // over what it reads.
    if (!root) {
      if (free_buffers.empty()) {
        buffer_of[i] = s.buffers++;
        s.buffer_item.push_back(0);
      } else {
        buffer_of[i] = free_buffers.back();
        free_buffers.pop_back();
      }
      int64_t& widest = s.buffer_item[static_cast<size_t>(buffer_of[i])];
      widest = std::max(widest, ItemSize(t.dtype));
    }
    step.buffer = buffer_of[i];
    for (int k = 0; k < step.arity; ++k) {
      if (step.args[k].kind == StepArg::kValue) free_buffers.push_back(step.args[k].index);
    }
    s.steps.push_back(std::move(step));
  }
  return s;
}

}  // namespace tc::expr
