#include "kernels/planner.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tc {

absl::string_view PathName(Path p) {
  switch (p) {
    case Path::kContiguous:
      return "contiguous";
    case Path::kScalarBroadcast:
      return "scalar_broadcast";
    case Path::kStrided:
      return "strided";
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
          "shapes ", absl::StrJoin(parts, " and "), " cannot be broadcast together: dim -",
          k + 1, " is ", o, " in one and ", d, " in another (sizes must match or be 1)"));
    }
  }
  return out;
}

namespace {

// Iteration dims while planning, in output order (outermost first) until reordered.
struct Dims {
  int ndim = 0;
  int num_operands = 0;
  int64_t sizes[kMaxRank];
  int64_t strides[kMaxOperands][kMaxRank];

  void Swap(int a, int b) {
    std::swap(sizes[a], sizes[b]);
    for (int op = 0; op < num_operands; ++op) std::swap(strides[op][a], strides[op][b]);
  }
};

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

}  // namespace

absl::StatusOr<Plan> PlanElementwise(absl::Span<const TensorView> inputs, DType compute_dtype,
                                     DType out_dtype) {
  if (inputs.empty() || inputs.size() + 1 > static_cast<size_t>(kMaxOperands)) {
    return absl::InvalidArgumentError(
        absl::StrCat("element-wise ops take 1 to ", kMaxOperands - 1, " inputs, got ",
                     inputs.size()));
  }
  absl::InlinedVector<const DimVector*, kMaxOperands> shapes;
  for (const TensorView& v : inputs) shapes.push_back(&v.shape);
  auto out_shape = BroadcastShapes(shapes);
  if (!out_shape.ok()) return out_shape.status();
  auto numel = CheckedNumel(*out_shape);
  if (!numel.ok()) return numel.status();

  Plan plan;
  plan.out_shape = *out_shape;
  plan.out_dtype = out_dtype;
  plan.compute_dtype = compute_dtype;
  plan.numel = *numel;
  plan.num_operands = static_cast<int>(inputs.size()) + 1;
  plan.dtypes[0] = out_dtype;
  for (size_t i = 0; i < inputs.size(); ++i) plan.dtypes[i + 1] = inputs[i].dtype;
  if (plan.numel == 0) {
    // Nothing to walk. An empty input's strides and offset were never bounded by its
    // storage, so they are not used at all.
    plan.ndim = 1;
    plan.path = Path::kContiguous;
    return plan;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    plan.offsets[i + 1] = inputs[i].offset * ItemSize(inputs[i].dtype);
  }

  // Byte strides per operand over the output's dims, broadcast dims at stride 0. Dims of size
  // 1 are dropped: they move nothing. Products cannot overflow: ValidateView bounded each
  // input's reach by its storage, and the output's by its numel.
  const int rank = static_cast<int>(plan.out_shape.size());
  const DimVector out_strides = ContiguousStrides(plan.out_shape);
  Dims d;
  d.num_operands = plan.num_operands;
  for (int k = 0; k < rank; ++k) {
    if (plan.out_shape[k] == 1) continue;
    const int j = d.ndim++;
    d.sizes[j] = plan.out_shape[k];
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
    d.sizes[0] = plan.numel;
    for (int op = 0; op < d.num_operands; ++op) d.strides[op][0] = ItemSize(plan.dtypes[op]);
  }
  plan.ndim = n;
  for (int j = 0; j < n; ++j) {
    plan.sizes[j] = d.sizes[j];
    for (int op = 0; op < d.num_operands; ++op) plan.strides[op][j] = d.strides[op][j];
  }

  plan.path = Path::kStrided;
  if (n == 1) {
    bool dense = true, dense_or_scalar = plan.strides[0][0] == ItemSize(out_dtype);
    for (int op = 1; op < plan.num_operands; ++op) {
      const int64_t s = plan.strides[op][0], item = ItemSize(plan.dtypes[op]);
      dense &= s == item;
      dense_or_scalar &= s == item || s == 0;
    }
    if (dense && dense_or_scalar) {
      plan.path = Path::kContiguous;
    } else if (dense_or_scalar) {
      plan.path = Path::kScalarBroadcast;
    }
  }
  return plan;
}

}  // namespace tc
