#include "kernels/planner.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/gpu/general_args.h"

namespace tc {

absl::string_view KernelName(Kernel k) {
  switch (k) {
    case Kernel::kTiles:
      return "tiles";
    case Kernel::kRows:
      return "rows";
    case Kernel::kCastRows:
      return "cast_rows";
    case Kernel::kGeneral:
      return "general";
  }
  return "unknown";
}

absl::StatusOr<DimVector> BroadcastShapes(absl::Span<const DimVector* const> shapes) {
  size_t rank = 0;
  for (const DimVector* s : shapes) rank = std::max(rank, s->size());
  DimVector out(rank, 1);
  for (size_t k = 0; k < rank; ++k) {  // k counts from the last dim
    int64_t& o = out[rank - 1 - k];
    for (const DimVector* s : shapes) {
      if (k >= s->size()) continue;
      const int64_t d = (*s)[s->size() - 1 - k];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      std::vector<std::string> parts;
      for (const DimVector* t : shapes) parts.push_back(ShapeToString(*t));
      return absl::InvalidArgumentError(absl::StrCat(
          "shapes ", absl::StrJoin(parts, " and "), " cannot be broadcast together: dim -", k + 1,
          " is ", o, " in one and ", d, " in another (sizes must match or be 1)"));
    }
  }
  return out;
}

namespace {

using Dims = IterationDims;

// True when dim `b` should move faster than dim `a` (go before it). Like TensorIterator:
// the first operand whose strides differ (ignoring broadcast zeros) decides; ties keep order.
bool ShouldSwap(const Dims& d, int a, int b) {
  for (int op = 0; op < d.num_operands; ++op) {
    const int64_t sa = d.strides[op][a], sb = d.strides[op][b];
    if (sa == 0 || sb == 0) continue;
    const int64_t ua = sa < 0 ? -sa : sa, ub = sb < 0 ? -sb : sb;
    if (ua != ub) return ub < ua;
  }
  return false;
}

// Some operand that moves along dim 0 moves faster along another dim (its smallest non-zero
// |stride| elsewhere): a transposed input or output, worth tiling so that both sides stay
// cache-friendly. One that is constant along dim 0 reads the same element for a whole row,
// which needs no tiling.
bool Permuted(const Plan& p) {
  for (int op = 0; op < p.num_operands; ++op) {
    if (p.strides[op][0] == 0) continue;
    int fastest = -1;
    int64_t best = 0;
    for (int d = 0; d < p.ndim; ++d) {
      const int64_t s = p.strides[op][d] < 0 ? -p.strides[op][d] : p.strides[op][d];
      if (s != 0 && (fastest < 0 || s < best)) {
        fastest = d;
        best = s;
      }
    }
    if (fastest > 0) return true;
  }
  return false;
}

// TileRule::kAnyPermuted: every permuted plan; inputs faster along dim 1 than dim 0 staged.
bool ChooseAnyPermutedTiles(Plan& p) {
  if (p.ndim < 2 || !Permuted(p)) return false;
  int staged = 0;
  for (int k = 1; k < p.num_operands; ++k) {
    const int64_t a0 = std::abs(p.strides[k][0]), a1 = std::abs(p.strides[k][1]);
    p.staged[k] = a1 != 0 && a1 < a0 ? static_cast<int8_t>(staged++) : int8_t{-1};
  }
  p.num_staged = staged;
  return true;
}

// TileRule::kDense, any rank (ChooseTileDims): operands of the op's own types, or any for an
// op whose tiles convert.
bool ChooseTiles(Plan& p, bool same_types, bool converting_tiles) {
  if (!same_types && !converting_tiles) return false;
  int64_t item[kMaxOperands];
  for (int k = 0; k < p.num_operands; ++k) item[k] = ItemSize(p.dtypes[k]);
  p.num_staged = ChooseTileDims(p.ndim, p.num_operands, p.sizes, p.strides[0], kMaxRank, item, 2,
                                p.staged, same_types ? p.fused : nullptr);
  return p.num_staged > 0;
}

// Row geometry; kRows where every operand allows it. Plans of up to three dims always take
// rows (kCastRows where some operand does not allow kRows). Past three dims (broadcasts whose
// dims alternate between the operands, which nothing coalesces), binary ops whose rows
// allow kRows, at least kMinDeepCols elements long and fewer than 2^31 of them: the GPU finds
// a row's start by 32-bit division per dim, once per row rather than per element as the
// general kernel does, in a kernel variant of its own (the others keep their registers); the
// rest stay on the general kernel.
constexpr int64_t kMinDeepCols = 4;

bool ChooseRows(Plan& p, bool same_types) {
  int64_t count = 1;
  for (int d = 1; d < p.ndim; ++d) count *= p.sizes[d];
  const bool deep = p.ndim > 3;
  if (deep && (p.num_operands != 3 || p.sizes[0] < kMinDeepCols || count > INT32_MAX)) {
    return false;
  }
  RowGeometry& r = p.rows;
  r.cols = p.sizes[0];
  r.inner_rows = p.ndim >= 2 ? p.sizes[1] : 1;
  r.count = count;
  const int64_t item = ItemSize(p.compute_dtype);
  r.vector_elems = static_cast<int>(16 / item);
  r.cast_elems = item == 8 ? 2 : 8;
  bool fast = same_types && r.cols % r.vector_elems == 0;
  for (int k = 0; k < p.num_operands; ++k) {
    const int64_t step = p.strides[k][0];
    r.repeated[k] = k > 0 && (step == 0 || r.cols == 1);
    r.dense[k] = !r.repeated[k] && step == ItemSize(p.dtypes[k]);
    int align = 16;
    for (int d = 1; d < p.ndim; ++d) {
      while (align > 1 && p.strides[k][d] % align != 0) align /= 2;
    }
    r.stride_align[k] = static_cast<int8_t>(align);
    const int64_t want = std::min<int64_t>(16, ItemSize(p.dtypes[k]) * r.vector_elems);
    fast = fast && (r.repeated[k] || (r.dense[k] && align >= want));
  }
  if (deep && !fast) return false;
  p.kernel = fast ? Kernel::kRows : Kernel::kCastRows;
  return true;
}

void ChooseKernel(Plan& p, bool bool_result, TileRule tiles, bool converting_tiles) {
  // The kernels that keep values in the compute type's own storage need every input of that
  // dtype and the output of the functor's own result type.
  const DType own_out = bool_result ? DType::kBool : p.compute_dtype;
  bool same_types = p.dtypes[0] == own_out;
  for (int k = 1; k < p.num_operands; ++k)
    same_types = same_types && p.dtypes[k] == p.compute_dtype;
  const bool tiled = tiles == TileRule::kAnyPermuted ? ChooseAnyPermutedTiles(p)
                                                     : ChooseTiles(p, same_types, converting_tiles);
  if (tiled) {
    p.kernel = Kernel::kTiles;
  } else if (!ChooseRows(p, same_types)) {
    p.kernel = Kernel::kGeneral;
  }
}

}  // namespace

std::vector<IndexPiece> SplitForIndexing(const IterationDims& space, int64_t numel,
                                         const int64_t* item, int64_t limit) {
  const int nops = space.num_operands;
  const auto stride = [&](int op, int d) -> int64_t {
    return space.strides[op][d] < 0 ? -space.strides[op][d] : space.strides[op][d];
  };
  IndexPiece whole;
  whole.numel = numel;
  std::copy(space.sizes, space.sizes + space.ndim, whole.sizes);
  std::vector<IndexPiece> done, todo = {whole};
  while (!todo.empty()) {
    IndexPiece p = todo.back();
    todo.pop_back();
    bool fits = p.numel <= limit;
    for (int op = 0; op < nops && fits; ++op) {
      int64_t reach = item[op];
      for (int d = 0; d < space.ndim; ++d) reach += stride(op, d) * (p.sizes[d] - 1);
      fits = reach <= limit;
    }
    if (fits || p.numel <= 1) {
      done.push_back(p);
      continue;
    }
    // The dim whose extent (size x largest |stride| among operands) is largest is split in two.
    int worst = -1;
    int64_t worst_extent = 0;
    for (int d = 0; d < space.ndim; ++d) {
      if (p.sizes[d] < 2) continue;
      int64_t extent = p.sizes[d];  // the element count alone can be what does not fit
      for (int op = 0; op < nops; ++op) extent = std::max(extent, stride(op, d) * p.sizes[d]);
      if (worst < 0 || extent >= worst_extent) {
        worst = d;
        worst_extent = extent;
      }
    }
    const int64_t half = p.sizes[worst] / 2;
    IndexPiece lo = p, hi = p;
    lo.sizes[worst] = half;
    hi.sizes[worst] = p.sizes[worst] - half;
    lo.numel = p.numel / p.sizes[worst] * half;
    hi.numel = p.numel - lo.numel;
    for (int op = 0; op < nops; ++op) hi.offsets[op] += half * space.strides[op][worst];
    todo.push_back(hi);
    todo.push_back(lo);
  }
  return done;
}

IterationDims DimsOf(const Plan& plan, int64_t* item) {
  IterationDims dims;
  dims.ndim = plan.ndim;
  dims.num_operands = plan.num_operands;
  for (int d = 0; d < plan.ndim; ++d) dims.sizes[d] = plan.sizes[d];
  for (int op = 0; op < plan.num_operands; ++op) {
    item[op] = ItemSize(plan.dtypes[op]);
    for (int d = 0; d < plan.ndim; ++d) dims.strides[op][d] = plan.strides[op][d];
  }
  return dims;
}

int ChooseTileDims(int ndim, int num_operands, int64_t* sizes, int64_t* strides, int rank,
                   const int64_t* item, int max_staged, int8_t* staged, int8_t* fused) {
  auto stride = [&](int k, int d) -> int64_t& { return strides[k * rank + d]; };
  const auto power_of_two = [](int64_t n) { return n >= 2 && (n & (n - 1)) == 0; };
  if (ndim < 2 || stride(0, 0) != item[0]) return 0;
  // The output dense along fewer than 16 elements: tile dim 0 fuses them (a power of two,
  // dividing the fused kernel's 16) with another dim.
  const bool fuse0 = sizes[0] < 16;
  if (fuse0 && (fused == nullptr || ndim < 3 || !power_of_two(sizes[0]))) return 0;
  const auto staged_along = [&](int k, int d) {
    return stride(k, d) == item[k] && stride(k, 0) != item[k] && stride(k, 0) != 0;
  };
  // A dim the staged inputs along `d` all go on in (their dense run continues there).
  const auto chained = [&](int d) {
    for (int e = 1; e < ndim; ++e) {
      bool all = e != d;
      for (int k = 1; k < num_operands && all; ++k) {
        all = !staged_along(k, d) || stride(k, e) == sizes[d] * item[k];
      }
      if (all) return e;
    }
    return -1;
  };
  int dim = -1, most = 0;
  for (int d = 1; d < ndim; ++d) {
    // 16 long, or (beside a fused dim 0) shorter where the run goes on in another dim.
    if (sizes[d] < 16 && !(fuse0 && power_of_two(sizes[d]) && chained(d) >= 0)) continue;
    int count = 0;
    for (int k = 1; k < num_operands; ++k) count += staged_along(k, d);
    if (count > most) {
      dim = d;
      most = count;
    }
  }
  if (most == 0 || most > max_staged) return 0;
  // With a fused dim 0, tile dim 1 is fused too where it is shorter than the fused tiles' 256
  // and its run goes on, as a power of two; dim 0's outer part is the output's fastest dim
  // left (its writes stay whole runs of the inner part).
  const int outer1 = fuse0 && sizes[dim] < 256 && power_of_two(sizes[dim]) ? chained(dim) : -1;
  int outer0 = -1;
  for (int d = 1; d < ndim && fuse0 && outer0 < 0; ++d) {
    if (d != dim && d != outer1) outer0 = d;
  }
  if (fuse0 && outer0 < 0) return 0;
  // Offsets within a tile fit 32 bits: every stride of the tile dims within 2^23 bytes; where
  // they are fused, what a tile of either fused shape (16 x 256, 128 x 32) spans along the
  // four dims within 2^31.
  for (int k = 0; k < num_operands; ++k) {
    if (!fuse0) {
      for (int d : {0, dim}) {
        if (std::abs(stride(k, d)) >= (int64_t{1} << 23)) return 0;
      }
      continue;
    }
    // Steps along an inner dim `d` of `inner` elements within a tile of `side`, and along the
    // outer one.
    const auto span = [&](int d, int64_t inner, int side, int outer) {
      const int64_t steps_in = std::min<int64_t>(inner, side) - 1;
      const int64_t steps_out = outer >= 0 && inner < side ? side / inner - 1 : 0;
      return std::make_pair(steps_in * std::abs(stride(k, d)),
                            outer >= 0 ? steps_out * std::abs(stride(k, outer)) : int64_t{0});
    };
    for (int d : {0, dim, outer0, outer1}) {
      if (d >= 0 && std::abs(stride(k, d)) >= (int64_t{1} << 31)) return 0;
    }
    for (const auto& [side0, side1] : {std::pair{16, 256}, std::pair{128, 32}}) {
      const auto [a0, b0] = span(0, sizes[0], side0, outer0);
      const auto [a1, b1] = span(dim, outer1 >= 0 ? sizes[dim] : side1, side1, outer1);
      const int64_t reach = a0 + b0 + a1 + b1;  // each under 2^39: no overflow
      if (reach >= (int64_t{1} << 31)) return 0;
    }
  }
  // Tiles of 16 to 64 along dim 0, at most 2^31 - 1 of them.
  if (sizes[0] * (fuse0 ? sizes[outer0] : 1) / 16 >= INT32_MAX) return 0;
  // New order: 0, dim, then outer 0 and outer 1 where fused, then the rest in order.
  int order[kMaxRank];
  int n = 0;
  order[n++] = 0;
  order[n++] = dim;
  if (fuse0) order[n++] = outer0;
  if (outer1 >= 0) order[n++] = outer1;
  for (int d = 1; d < ndim; ++d) {
    if (d != dim && !(fuse0 && d == outer0) && d != outer1) order[n++] = d;
  }
  int64_t old_sizes[kMaxRank];
  std::copy(sizes, sizes + ndim, old_sizes);
  for (int d = 0; d < ndim; ++d) sizes[d] = old_sizes[order[d]];
  for (int k = 0; k < num_operands; ++k) {
    int64_t old[kMaxRank];
    for (int d = 0; d < ndim; ++d) old[d] = stride(k, d);
    for (int d = 0; d < ndim; ++d) stride(k, d) = old[order[d]];
  }
  if (fused != nullptr) {
    fused[0] = static_cast<int8_t>(fuse0 ? 2 : -1);
    fused[1] = static_cast<int8_t>(outer1 >= 0 ? 3 : -1);
  }
  int count = 0;
  for (int k = 0; k < num_operands; ++k) {
    staged[k] = k > 0 && staged_along(k, 1) ? static_cast<int8_t>(count++) : int8_t{-1};
  }
  return count;
}

absl::Status BuildIteration(absl::Span<const TensorView> inputs, DType out_dtype,
                            const DimVector& out_strides_in, Iteration* it) {
  if (inputs.empty() || inputs.size() + 1 > static_cast<size_t>(kMaxIterOperands)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "element-wise work takes 1 to ", kMaxIterOperands - 1, " inputs, got ", inputs.size()));
  }
  absl::InlinedVector<const DimVector*, kMaxOperands> shapes;
  for (const TensorView& v : inputs) shapes.push_back(&v.shape);
  auto out_shape = BroadcastShapes(shapes);
  if (!out_shape.ok()) return out_shape.status();
  auto numel = CheckedNumel(*out_shape);
  if (!numel.ok()) return numel.status();

  it->out_shape = *out_shape;
  it->out_strides = out_strides_in.empty() ? ContiguousStrides(it->out_shape) : out_strides_in;
  if (it->out_strides.size() != it->out_shape.size()) {
    return absl::InvalidArgumentError("output strides do not match the output rank");
  }
  it->numel = *numel;
  it->num_operands = static_cast<int>(inputs.size()) + 1;
  it->ndim = 1;
  it->out_storage_bytes = 0;
  it->out_has_gaps = false;
  std::fill(it->offsets, it->offsets + it->num_operands, 0);
  if (it->numel == 0) {
    // Nothing to walk. An empty input's strides and offset were never bounded by its
    // storage, so they are not used at all.
    it->sizes[0] = 0;
    for (int op = 0; op < it->num_operands; ++op) it->strides[op][0] = 0;
    return absl::OkStatus();
  }
  // Storage the output strides span (they were checked to be non-negative and not to
  // overflow when multiplied out).
  // Checked all the same: the last element may sit at 2^63 - 1, one short of overflowing.
  int64_t last = 0, span = 0, count = 0;
  bool overflow = false;
  for (size_t k = 0; k < it->out_shape.size(); ++k) {
    overflow = overflow ||
               __builtin_mul_overflow(it->out_shape[k] - 1, it->out_strides[k], &span) ||
               __builtin_add_overflow(last, span, &last);
  }
  if (overflow || __builtin_add_overflow(last, 1, &count) ||
      __builtin_mul_overflow(count, ItemSize(out_dtype), &it->out_storage_bytes)) {
    return absl::InvalidArgumentError("the output does not fit in 2^63 bytes");
  }
  it->out_has_gaps = it->out_storage_bytes != it->numel * ItemSize(out_dtype);
  for (size_t i = 0; i < inputs.size(); ++i) {
    it->offsets[i + 1] = inputs[i].offset * ItemSize(inputs[i].dtype);
  }

  // Byte strides per operand over the output's dims, broadcast dims at stride 0. Dims of size
  // 1 are dropped: they move nothing. Products cannot overflow: ValidateView bounded each
  // input's reach by its storage, and the output's by its numel.
  const int rank = static_cast<int>(it->out_shape.size());
  const DimVector& out_strides = it->out_strides;
  Dims& d = *it;
  d.ndim = 0;
  for (int k = 0; k < rank; ++k) {
    if (it->out_shape[k] == 1) continue;
    const int j = d.ndim++;
    d.sizes[j] = it->out_shape[k];
    d.strides[0][j] = out_strides[k] * ItemSize(out_dtype);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorView& v = inputs[i];
      const int vk = k - (rank - static_cast<int>(v.shape.size()));
      const bool broadcast = vk < 0 || v.shape[vk] == 1;
      d.strides[i + 1][j] = broadcast ? 0 : v.strides[vk] * ItemSize(v.dtype);
    }
  }

  // Fastest-moving dim first: start from the reversed output order, then sort stably so that
  // smaller strides come first.
  for (int a = 0, b = d.ndim - 1; a < b; ++a, --b) d.Swap(a, b);
  for (int i = 1; i < d.ndim; ++i) {
    for (int j = i; j > 0 && ShouldSwap(d, j - 1, j); --j) d.Swap(j - 1, j);
  }

  // Coalesce neighbours whose strides chain for every operand.
  int n = 0;
  for (int j = 0; j < d.ndim; ++j) {
    if (n > 0) {
      bool chain = true;
      for (int op = 0; op < d.num_operands && chain; ++op) {
        chain = d.strides[op][j] == d.strides[op][n - 1] * d.sizes[n - 1];
      }
      if (chain) {
        d.sizes[n - 1] *= d.sizes[j];
        continue;
      }
    }
    d.sizes[n] = d.sizes[j];
    for (int op = 0; op < d.num_operands; ++op) d.strides[op][n] = d.strides[op][j];
    ++n;
  }

  if (n == 0) {  // Every dim was 1, or rank 0: one element.
    n = 1;
    d.sizes[0] = it->numel;
    d.strides[0][0] = ItemSize(out_dtype);
    for (size_t i = 0; i < inputs.size(); ++i) d.strides[i + 1][0] = ItemSize(inputs[i].dtype);
  }
  d.ndim = n;
  return absl::OkStatus();
}

Plan PlanDenseRun(DType compute, DType out, absl::Span<const DType> inputs) {
  Plan plan;
  plan.ndim = 1;
  plan.num_operands = static_cast<int>(inputs.size()) + 1;
  plan.compute_dtype = compute;
  plan.out_dtype = plan.dtypes[0] = out;
  for (size_t k = 0; k < inputs.size(); ++k) plan.dtypes[k + 1] = inputs[k];
  plan.kernel = Kernel::kCastRows;
  return plan;
}

Plan PlanExpressionOutput(const Iteration& it, Kernel kernel, DType out, DType compute) {
  Plan plan;
  plan.out_shape = it.out_shape;
  plan.out_strides = it.out_strides;
  plan.out_storage_bytes = it.out_storage_bytes;
  plan.out_has_gaps = it.out_has_gaps;
  plan.out_dtype = out;
  plan.compute_dtype = compute;
  plan.numel = it.numel;
  // The output alone: the inputs' side of the iteration lives in the program.
  plan.num_operands = 1;
  plan.dtypes[0] = out;
  plan.ndim = it.ndim;
  for (int j = 0; j < it.ndim; ++j) {
    plan.sizes[j] = it.sizes[j];
    plan.strides[0][j] = it.strides[0][j];
  }
  plan.kernel = kernel;
  return plan;
}

absl::StatusOr<Plan> PlanElementwise(absl::Span<const TensorView> inputs, DType compute_dtype,
                                     DType out_dtype, const DimVector& out_strides,
                                     bool bool_result, TileRule tiles, bool converting_tiles) {
  if (inputs.empty() || inputs.size() + 1 > static_cast<size_t>(kMaxOperands)) {
    return absl::InvalidArgumentError(absl::StrCat("element-wise ops take 1 to ", kMaxOperands - 1,
                                                   " inputs, got ", inputs.size()));
  }
  Iteration it;
  if (auto s = BuildIteration(inputs, out_dtype, out_strides, &it); !s.ok()) return s;
  Plan plan;
  plan.out_shape = std::move(it.out_shape);
  plan.out_strides = std::move(it.out_strides);
  plan.out_storage_bytes = it.out_storage_bytes;
  plan.out_has_gaps = it.out_has_gaps;
  plan.out_dtype = out_dtype;
  plan.compute_dtype = compute_dtype;
  plan.numel = it.numel;
  plan.num_operands = it.num_operands;
  plan.dtypes[0] = out_dtype;
  for (size_t i = 0; i < inputs.size(); ++i) plan.dtypes[i + 1] = inputs[i].dtype;
  if (plan.numel == 0) {
    plan.ndim = 1;
    plan.kernel = Kernel::kGeneral;  // never run: nothing to walk
    return plan;
  }
  plan.ndim = it.ndim;
  for (int op = 0; op < it.num_operands; ++op) {
    plan.offsets[op] = it.offsets[op];
    for (int j = 0; j < it.ndim; ++j) plan.strides[op][j] = it.strides[op][j];
  }
  for (int j = 0; j < it.ndim; ++j) plan.sizes[j] = it.sizes[j];

  ChooseKernel(plan, bool_result, tiles, converting_tiles);
  return plan;
}

ExprWalk PlanExpression(Iteration* it, const int64_t* item, bool long_math, int max_staged) {
  ExprWalk w;
  const int nops = it->num_operands;
  if (it->ndim <= 3 && it->numel > 0) {
    w.num_staged = ChooseTileDims(it->ndim, nops, it->sizes, &it->strides[0][0], kMaxRank, item,
                                  max_staged, w.staged, nullptr);
    if (w.num_staged > 0) {
      // Tiles 32 x 64 (unroll 8) where the staged tiles fit a block's 48 KiB of static shared
      // memory, 32 x 32 (unroll 4) otherwise: see --sweep of tensorcompute-expr-bench.
      w.kernel = Kernel::kTiles;
      int64_t shared = 0;
      for (int k = 1; k < nops; ++k) {
        if (w.staged[k] >= 0) shared += 32 * 65 * item[k];
      }
      w.unroll = shared <= 48 * 1024 ? 8 : 4;
      return w;
    }
  }
  if (it->ndim > 2) {
    // The ops' general walk: their elements a thread, but one where some call is long math
    // (each element a thread takes is another inlined copy of the tree for NVRTC).
    w.kernel = Kernel::kGeneral;
    w.unroll = long_math ? 1 : cuda::kGeneralUnroll;
    return w;
  }
  w.kernel = Kernel::kRows;
  // 16 bytes of the widest dense operand per access, where every dense operand's rows start
  // apart by a multiple of its pack; any other step runs element by element. Mixed widths
  // (float16 inputs, a float32 output) take 16 bytes of the narrowest, so up to 32 of the
  // widest.
  int64_t widest = 1, narrowest = 16;
  bool packable = true;
  for (int k = 0; k < nops; ++k) {
    const int64_t step = it->strides[k][0];
    if (step == item[k]) {
      widest = std::max(widest, item[k]);
      narrowest = std::min(narrowest, item[k]);
    } else if (step != 0 || k == 0) {
      packable = false;
    }
  }
  // Every dense operand's rows start apart by a multiple of a pack of `v`, up to 16 bytes
  // (wider packs are several accesses).
  auto rows_keep = [&](int64_t v) {
    for (int k = 0; k < nops; ++k) {
      if (it->strides[k][0] != item[k]) continue;
      if (it->ndim == 2 && it->strides[k][1] % std::min<int64_t>(item[k] * v, 16) != 0) {
        return false;
      }
    }
    return true;
  };
  int64_t v = packable ? std::min(16 / narrowest, 32 / widest) : 1;
  while (v > 1 && !rows_keep(v)) v /= 2;
  // Bytes in flight per thread, against NVRTC's time (each element of a pack and each pack
  // per thread is another inlined copy of the tree). Measured on the H100 (--sweep of
  // tensorcompute-expr-bench, % of a copy of the same bytes):
  // - rows broadcast along a second dim ([8192, 8192] with [8192] rows) need 64 bytes of
  //   each float32 operand per thread: sigmoid(a * b + c) * d at 85% with 16 (V=4 U=1), 88%
  //   with 32 (V=8 U=1), 102% with 64 (V=8 U=2); (a - 0.5) * 1.7 * b + c at 84%, 85% and 97%;
  // - one long row (contiguous data) is at 103-104% of copy with 16 bytes already, so a tree
  //   with long math keeps one pack (NVRTC: sigmoid(a * b + 1) * a in 92 instead of 117 ms
  //   on the 2-core machine), cheaper trees two;
  // - float16 inputs with a float32 output: one pack of 16 bytes of the inputs (V=8) at
  //   102%, against 91% with V=4 U=1 and 85% with V=8 U=2.
  const bool several_rows = it->ndim == 2 && it->sizes[1] > 1;
  if (v > 1 && several_rows) {
    // Twice the pack (up to 32 bytes of the widest) where the rows keep it.
    if (it->sizes[0] >= 2 * v && 2 * v * widest <= 32 && rows_keep(2 * v)) v *= 2;
    w.unroll = 2;
  } else {
    w.unroll = v > 1 && (long_math || v * widest > 16) ? 1 : 2;
  }
  w.vector = static_cast<int>(v);
  return w;
}

int FitVector(const ExprWalk& walk, const IterationDims& it, const int64_t* item,
              char* const* base) {
  if (walk.kernel != Kernel::kRows) return 1;
  int v = walk.vector;
  for (; v > 1; v /= 2) {
    bool aligned = true;
    for (int k = 0; k < it.num_operands && aligned; ++k) {
      if (it.strides[k][0] != item[k]) continue;
      const auto bytes = static_cast<uintptr_t>(std::min<int64_t>(item[k] * v, 16));
      aligned = reinterpret_cast<uintptr_t>(base[k]) % bytes == 0;
    }
    if (aligned) break;
  }
  return v;
}

}  // namespace tc
