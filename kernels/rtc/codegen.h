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

// How a kernel walks the iteration space, chosen per request from the program's geometry
// and where its operands are.
struct Walk {
  enum Kind : uint8_t {
    // At most two dims (RowArgs): contiguous data, scalars, row and column broadcasts,
    // strided rows. With vector > 1 every operand is dense along a row or repeated, and each
    // dense one moves `vector` elements per access (16 bytes of the widest); the last,
    // partial pack of a row goes element by element.
    kRows,
    // Any rank (StridedArgs), one element per thread and step; 32-bit index math by
    // multiply-and-shift division where every offset fits, 64-bit division otherwise.
    kStrided,
    // Two or three dims (StridedArgs) where the planner chose tiles (Program::kernel): a
    // block takes 32 x 32 elements of dims 0 and 1 (dim 2: the tiles' batches), reads the
    // staged inputs along dim 1 into shared memory and evaluates along dim 0, so that every
    // load and store of a warp is coalesced.
    kTiles,
  } kind = kRows;
  int vector = 1;
  // Packs (kRows) each thread has in flight per step.
  int unroll = 1;
  int ndim = 1;
  bool wide = false;
};

// `base[k]`: operand k's element (0, ..., 0), as the program's space describes it.
Walk ChooseWalk(const expr::Program& program, char* const* base);

// The kernel's source; its entry point is "tc_expr". Equal sources are equal kernels (the
// compiled-kernel cache's key).
std::string GenerateSource(const expr::Program& program, const Walk& walk);

// The kernel's parameter after its walk arguments, the evaluator, as bytes: a zero (see
// Rounded in prelude.cuh), the literals converted to the dtype their call computes them in,
// then each call's functor (its integer division by zero flag pointed at `error`).
std::string EvaluatorParam(const expr::Program& program, int* error);

// The ops of the tree that may raise integer division by zero, as an error names them:
// "floor_divide", "floor_divide' or 'remainder" (quoted by the caller); empty when none can.
std::string RaisingOps(const expr::Program& program);

// The walk arguments, and the launch's blocks and threads.
struct Geometry {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
};
std::string WalkArgs(const expr::Program& program, const Walk& walk, char* const* base,
                     int multiprocessors, Geometry* geometry);

}  // namespace tc::rtc
