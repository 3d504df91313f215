// CUDA source for a fused expression (kernels/expr/program.h): one kernel that loads each
// input once per element, evaluates the tree in registers with the catalog's own functors
// (kernels/rtc/prelude.cuh) and stores the output, generated from the checked, typed tree
// only (op types from the catalog, dtypes, numbers of operands: no text of the client's).
// Literal values, attributes and pointers are the kernel's parameters, so one compiled
// kernel serves every request whose tree differs only in them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/expr/program.h"
#include "kernels/rtc/args.h"

namespace tc::rtc {

// The kernel's source for the program's walk (Program::walk) with `vector` elements per access
// (FitVector: the walk's, or narrower where the operands start less aligned); its entry point
// is "tc_expr". Equal sources are equal kernels (the compiled-kernel cache's key).
std::string GenerateSource(const expr::Program& program, int vector);

// The kernel's parameter after its walk arguments, the evaluator, as bytes: a zero (see
// Rounded in prelude.cuh), the literals converted to the dtype their call computes them in,
// then each call's functor (its integer division by zero flag pointed at `error`).
std::string EvaluatorParam(const expr::Program& program, int* error);

// The ops of the tree that may raise integer division by zero, as an error names them:
// "floor_divide", "floor_divide' or 'remainder" (quoted by the caller); empty when none can.
std::string RaisingOps(const expr::Program& program);

// One launch of the walk: its arguments, and its blocks and threads.
struct Geometry {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
};
struct WalkPart {
  std::string args;
  Geometry geometry;
};
// The launches that walk the program's space, in order: one, or for the general walk one a
// piece of the space that fits 32-bit index math (SplitForIndexing). `base[k]`: operand k's
// element (0, ..., 0), as the program's space describes it.
std::vector<WalkPart> Walk(const expr::Program& program, int vector, char* const* base,
                           int multiprocessors);

}  // namespace tc::rtc
