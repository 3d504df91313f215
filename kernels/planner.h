// The element-wise planner (TensorIterator's role): from validated input views to the one
// iteration space every backend executes. Pure host code, no backend in it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/dtype.h"
#include "kernels/tensor_view.h"

namespace tc {

// Output plus up to three inputs (ternary ops).
inline constexpr int kMaxOperands = 4;

// The loop family a backend runs a plan with, chosen here, once, from the plan's geometry and
// dtypes. Backends switch on it and check only what a plan cannot know: where the pointers
// they are given point (a kRows plan whose operands do not start on a 16-byte boundary runs
// as kCastRows; on the GPU, one whose misaligned operands are dense inputs of 1- or 2-byte
// types beside an aligned output stays kRows, its packs shifted into place). The CPU runs kRows,
// kCastRows and kGeneral through one row loop.
enum class Kernel : uint8_t {
  // Two dims (and a batch dim) where some input is dense along dim 1 and the output along dim
  // 0 (a transposed input or output): inputs staged through tiles (Plan::staged) so that both
  // sides are walked along their dense dim. Every operand of the op's own types.
  kTiles,
  // Rows along dim 0 (Plan::rows) over the other dims, the output and every input dense
  // along a row or repeated (a scalar, a broadcast column), rows starting where 16-byte
  // vectors can; every operand of the op's own types. Past three dims, binary ops' rows of
  // four elements or more (run as the general kernel where the pointers are not aligned).
  kRows,
  // The same rows, up to three dims, with any operand dtypes (converted while loading and
  // storing) and any step along a row.
  kCastRows,
  // Any rank, strides and dtypes.
  kGeneral,
};

absl::string_view KernelName(Kernel k);

// Which plans a backend's tile kernel takes: the planner's rule for Kernel::kTiles, given by
// whoever plans for that backend (Device::tile_rule in the server).
enum class TileRule : uint8_t {
  // Any rank of two or more, every operand of the op's own types (any for a cast), the
  // output dense along dim 0; the dim along which one or two inputs are dense, and not along
  // dim 0, moved to dim 1 and those inputs staged (two tiles fill the shared memory a block
  // may take); both tile dims at least 16 long, the other dims batches. The CUDA tile
  // kernel's; the default, since every backend runs such plans.
  kDense,
  // Every permuted plan (some operand moving faster along another dim than
  // dim 0) of two dims or more, any dtypes; the inputs that
  // move faster along dim 1 than along dim 0 staged, converted as they are copied. The CPU's.
  kAnyPermuted,
};

// kRows and kCastRows: rows of `cols` elements along dim 0, `inner_rows` of them along dim 1,
// `count` rows in all (every dim past dim 0).
struct RowGeometry {
  int64_t cols = 1;
  int64_t inner_rows = 1;
  int64_t count = 1;
  // Per operand: one element for a whole row (an input with step 0 along the row, or rows of
  // one element)...
  bool repeated[kMaxOperands] = {};
  // ...or dense along the row (step of one element)...
  bool dense[kMaxOperands] = {};
  // ...whose rows start apart by a multiple of this (a power of two, at most 16): a dense
  // operand takes vector accesses up to this wide where its first element is aligned as well.
  int8_t stride_align[kMaxOperands] = {};
  // Elements per vector access: 16 bytes of the compute type in kRows; in kCastRows, the run
  // of elements one thread converts (8, or 2 of 8-byte types), in one access per operand
  // where it is dense and aligned for it. (The CUDA launcher checks its compiled widths
  // against these.)
  int vector_elems = 1;
  int cast_elems = 1;
};

struct Plan {
  // What the client sees: the broadcast output shape, its strides in elements (offset 0), and
  // the bytes of storage they span.
  DimVector out_shape;
  DimVector out_strides;
  int64_t out_storage_bytes = 0;
  // The output's strides leave storage between its elements, which must read as zeros: who
  // allocates the output clears it first.
  bool out_has_gaps = false;
  DType out_dtype = DType::kFloat32;
  // Type the functor computes in.
  DType compute_dtype = DType::kFloat32;
  int64_t numel = 0;

  // The iteration space after dropping size-1 dims, reordering (fastest-moving dim first) and
  // coalescing. Always at least one dim. Operand 0 is the output, then the inputs in order.
  int ndim = 1;
  int64_t sizes[kMaxRank] = {};
  int num_operands = 0;
  DType dtypes[kMaxOperands] = {};
  // Byte strides per operand and dim, 0 where an input is broadcast.
  int64_t strides[kMaxOperands][kMaxRank] = {};
  // Byte offset from an operand's storage base to its element (0, ..., 0).
  int64_t offsets[kMaxOperands] = {};

  // How backends walk it.
  Kernel kernel = Kernel::kGeneral;
  RowGeometry rows;
  // kTiles: the index of operand k's tile (in shared memory on the GPU, a buffer on the CPU),
  // -1 for operands read in place.
  int8_t staged[kMaxOperands] = {-1, -1, -1, -1};
  int num_staged = 0;
  // kTiles, tile dim j (0 or 1) fused from two plan dims: plan dim j, a power of two long,
  // inside plan dim fused[j] (-1 where dim j alone is the tile dim). Any kernel may walk the
  // plan's dims as they are; the fusing is the CUDA tile kernel's: an output dense along only
  // 8 elements (a rank-7 permutation) still gets tiles 16 or 128 deep, written in whole runs.
  int8_t fused[2] = {-1, -1};
};

// Operands of the widest element-wise work, an expression: its output and its inputs.
inline constexpr int kMaxExprInputs = 16;
inline constexpr int kMaxIterOperands = kMaxExprInputs + 1;

// An iteration space over any number of operands (operand 0 the output): `ndim` dims, the
// fastest-moving first, size-1 dims dropped and neighbours that chain for every operand
// coalesced; byte strides per operand and dim, 0 where an input is broadcast.
struct IterationDims {
  int ndim = 0;
  int num_operands = 0;
  int64_t sizes[kMaxRank];
  int64_t strides[kMaxIterOperands][kMaxRank];

  void Swap(int a, int b) {
    std::swap(sizes[a], sizes[b]);
    for (int op = 0; op < num_operands; ++op) std::swap(strides[op][a], strides[op][b]);
  }
};

// The first half of planning, for any number of inputs: the broadcast output's shape, strides
// (C-contiguous when `out_strides` is empty) and extent, and the iteration space.
struct Iteration : IterationDims {
  DimVector out_shape;
  DimVector out_strides;
  int64_t out_storage_bytes = 0;
  bool out_has_gaps = false;
  int64_t numel = 0;
  // Byte offset from an operand's storage base to its element (0, ..., 0).
  int64_t offsets[kMaxIterOperands] = {};
};

// The tile rule (Kernel::kTiles), one for ops and expressions: tiles span dim 0 (where the
// output is dense, at least 16 long) and the dim along which the most inputs that are not
// dense along dim 0 are dense ("staged": up to `max_staged`, as many tiles as fit in the
// shared memory a block may take), which moves to dim 1; the dims left are the tiles' batch
// dims. Both tile dims at least 16 long, a tile's offsets within 32 bits. `strides`: operand
// k's stride along dim d at strides[k * rank + d], bytes; `item[k]`: its element size.
// Returns the number of staged operands, 0 (nothing moved) where tiles do not apply;
// staged[k] is each one's tile, -1 for the others.
// `fused` (nullptr: no fusing): where the output is dense along fewer than 16 elements (a
// power of two), tile dim 0 fuses them with the output's fastest other dim, and tile dim 1,
// shorter than 256 and a power of two, with the dim its staged inputs' run goes on in: dims
// end as [inner 0, inner 1, outer 0, outer 1 (if fused), batch...] and fused[j] names outer j
// (Plan::fused). What a tile of the CUDA kernel's fused shapes (16 x 256, 128 x 32) spans
// along the four dims within 2^31 bytes.
int ChooseTileDims(int ndim, int num_operands, int64_t* sizes, int64_t* strides, int rank,
                   const int64_t* item, int max_staged, int8_t* staged, int8_t* fused);

// How a fused expression's one kernel walks its iteration space: the planner's choice
// (PlanExpression), which the generated kernel follows.
struct ExprWalk {
  // kTiles: two or three dims, the `staged` inputs read through tiles of 32 x (8 * unroll)
  // elements, evaluated along dim 0 (the tiles of Kernel::kTiles, any dtypes).
  // kRows: at most two dims, rows along dim 0; each operand dense along them (or repeated)
  // moves `vector` elements per access, `unroll` packs per thread and step, the last partial
  // pack of a row element by element.
  // kGeneral: any rank and strides, the ops' general walk (`unroll` elements a thread and
  // step), in pieces that fit 32-bit index math (SplitForIndexing).
  Kernel kernel = Kernel::kGeneral;
  int vector = 1;
  int unroll = 1;
  // kTiles: the tile of each operand (-1 for those read in place).
  int8_t staged[kMaxIterOperands] = {};
  int num_staged = 0;
};

// Plans a fused expression over `it` (operand 0 the output; the tile rule may move its dims).
// `item[k]`: operand k's element size. `long_math`: some call of the tree is long math per
// element (pow, erf...), each inlined copy of which costs compile time. The vector width
// assumes each dense operand's first element aligned for it; the launcher narrows it to where
// the operands are (FitVector).
ExprWalk PlanExpression(Iteration* it, const int64_t* item, bool long_math, int max_staged);

// The widest vector, up to walk.vector, that every operand dense along dim 0 of a kRows walk
// takes from where it starts (base[k], its element (0, ..., 0)): a pack aligned to its size,
// up to 16 bytes. 1 for other walks.
int FitVector(const ExprWalk& walk, const IterationDims& it, const int64_t* item,
              char* const* base);

// Fills `it` for `inputs` (validated with ValidateView) and an output of `out_dtype`. With no
// elements, ndim is 1 and sizes[0] 0.
absl::Status BuildIteration(absl::Span<const TensorView> inputs, DType out_dtype,
                            const DimVector& out_strides, Iteration* it);

// Broadcasts `inputs` (already validated with ValidateView) against each other, NumPy style,
// and plans an output of `out_dtype` computed in `compute_dtype`, with `out_strides` (in
// elements, non-overlapping, non-negative; C-contiguous when empty). `bool_result`: the op's
// functor returns bool (comparisons), so its own output type is bool, not the compute type.
// `converting_tiles`: under TileRule::kDense, the op's tile kernel takes operands of other
// dtypes too for this compute type (OpSpec::converting_tiles), so its plans of any dtypes may
// be tiled.
absl::StatusOr<Plan> PlanElementwise(absl::Span<const TensorView> inputs, DType compute_dtype,
                                     DType out_dtype, const DimVector& out_strides = {},
                                     bool bool_result = false, TileRule tiles = TileRule::kDense,
                                     bool converting_tiles = false);

// A one-dimensional dense run of `compute` over operands of `inputs` dtypes into `out`,
// converting each as it is read and written (Kernel::kCastRows): how one
// step of an expression is run block by block, and a literal folded, with the ops' own loops.
// Sizes and strides are the caller's to set (per block, or one element).
Plan PlanDenseRun(DType compute, DType out, absl::Span<const DType> inputs);

// The plan an expression is answered with: its output's shape, strides and extent from the
// iteration space `it` (whose inputs' side the program keeps), walked by `kernel` (its
// ExprWalk's), computed in `compute` at its root.
Plan PlanExpressionOutput(const Iteration& it, Kernel kernel, DType out, DType compute);

// A piece of an iteration space (SplitForIndexing): its sizes along the space's dims (its
// strides are the space's), its elements, and each operand's byte offset from the space's
// element (0, ..., 0) to the piece's.
struct IndexPiece {
  int64_t numel = 0;
  int64_t sizes[kMaxRank] = {};
  int64_t offsets[kMaxIterOperands] = {};
};

// Splits `space` (`numel` elements; operand k's elements item[k] bytes) into pieces whose
// element count, and every operand's reach from the piece's first element, fit in `limit`:
// the one decision of whether a walk's index math fits 32 bits (2^31 - 1), for the general
// walk of ops and of expressions alike. Pieces cover the elements exactly once, first to
// last in the space's order of its slowest dims; a space that fits comes back whole.
std::vector<IndexPiece> SplitForIndexing(const IterationDims& space, int64_t numel,
                                         const int64_t* item, int64_t limit = INT32_MAX);

// A plan's iteration space as IterationDims, and its operands' element sizes.
IterationDims DimsOf(const Plan& plan, int64_t* item);

// NumPy broadcast of several shapes, with a message naming the dims that clash.
absl::StatusOr<DimVector> BroadcastShapes(absl::Span<const DimVector* const> shapes);

}  // namespace tc
