// An expression as the ops it means, one after another: each call of the tree becomes a step
// that runs its catalog op over values already computed (the request's inputs, literals, and
// the results of earlier steps kept in numbered buffers). Backends that evaluate a program op
// by op (the CPU in blocks, CUDA while an expression's fused kernel compiles) share this
// schedule, so both compute exactly what the ops compute alone.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/catalog.h"
#include "kernels/dtype.h"
#include "kernels/expr/program.h"
#include "kernels/ops/attributes.h"
#include "kernels/planner.h"

namespace tc::expr {

// Where a step's argument comes from.
struct StepArg {
  enum Kind : uint8_t { kValue, kInput, kConstant } kind = kInput;
  // kValue: the buffer an earlier step wrote; kInput: the request's input; kConstant: the
  // index into Steps::constants.
  int index = 0;
  // The dtype the step reads it as (a value's own dtype, an input's, or the literal's after
  // its conversion).
  DType dtype = DType::kFloat32;
};

struct Step {
  const CatalogEntry* op = nullptr;
  Attrs attrs;
  // The arguments' result type and the op's compute dtype for it (NodeType), and the dtype the
  // step stores: its value's, or the program's output dtype at the root.
  DType result_type = DType::kFloat32;
  DType compute = DType::kFloat32;
  DType out_dtype = DType::kFloat32;
  // Where the result goes; -1: the program's output (the root, the last step).
  int buffer = -1;
  int arity = 0;
  StepArg args[kMaxOperands - 1];
};

struct Steps {
  std::vector<Step> steps;
  // Buffers live values take at most at once (a buffer is reused once its value is read), and
  // the widest element each holds, in bytes.
  int buffers = 0;
  std::vector<int64_t> buffer_item;
  // Literals, each converted to the dtype its consumer reads it as (StepArg::dtype), in the
  // low bytes of 8.
  std::vector<uint64_t> constants;
  // Inputs some step reads.
  std::vector<bool> input_used;
};

// The steps of `program`, in post-order. Every call of a prepared program takes at least one
// input (FoldConstants folded the others), and a step never writes a buffer it reads.
Steps MakeSteps(const Program& program);

}  // namespace tc::expr
