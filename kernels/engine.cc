#include "kernels/engine.h"

#include <algorithm>
#include <iterator>
#include <numeric>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/op_types.h"

namespace tc {
namespace {

int Category(DType t) { return t == DType::kBool ? 0 : IsFloating(t) ? 2 : 1; }

// Output strides (elements) for `options` over an output of `shape` computed from `inputs`.
absl::StatusOr<DimVector> OutputStrides(const DimVector& shape, const OutputOptions& options,
                                        absl::Span<const TensorView> inputs) {
  const size_t rank = shape.size();
  if (!options.strides.empty()) {
    if (options.strides.size() != rank) {
      return absl::InvalidArgumentError(absl::StrCat(options.strides.size(),
                                                     " output strides given for an output of rank ",
                                                     rank, " ", ShapeToString(shape)));
    }
    // Non-negative and non-overlapping: sorted by stride, each dim must step past everything
    // the faster dims reach.
    std::vector<size_t> order(rank);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return options.strides[a] < options.strides[b]; });
    int64_t reach = 0;  // highest element index reachable by the dims so far
    for (size_t d : order) {
      const int64_t s = options.strides[d];
      if (s < 0) {
        return absl::InvalidArgumentError(absl::StrCat("output stride ", s, " is negative"));
      }
      if (shape[d] <= 1) continue;
      if (s <= reach) {
        return absl::InvalidArgumentError(absl::StrCat(
            "output strides [", absl::StrJoin(options.strides, ","), "] overlap for shape ",
            ShapeToString(shape), ": dim ", d, " steps ", s, " but faster dims reach ", reach));
      }
      int64_t span;
      if (__builtin_mul_overflow(s, shape[d] - 1, &span) ||
          __builtin_add_overflow(reach, span, &reach)) {
        return absl::InvalidArgumentError("output strides overflow 64-bit offsets");
      }
    }
    return options.strides;
  }
  if (options.layout == OutputOptions::Layout::kContiguous || inputs.empty() || rank == 0) {
    return ContiguousStrides(shape);
  }
  // Like the first input's memory order: its dims from largest to smallest |stride| (broadcast
  // and missing dims outermost), dense.
  const TensorView& first = inputs[0];
  DimVector in_strides(rank, 0);
  for (size_t k = 0; k < first.shape.size(); ++k) {
    const size_t ok = k + rank - first.shape.size();
    in_strides[ok] = first.shape[k] == 1 ? 0 : std::abs(first.strides[k]);
  }
  std::vector<size_t> order(rank);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const bool za = in_strides[a] == 0, zb = in_strides[b] == 0;
    if (za != zb) return za;  // broadcast dims first (outermost)
    return in_strides[a] > in_strides[b];
  });
  DimVector strides(rank);
  int64_t s = 1;
  for (size_t i = rank; i-- > 0;) {
    strides[order[i]] = s;
    // As in ContiguousStrides: only an empty output has dims whose product overflows, and its
    // strides reach nothing, so they saturate.
    if (__builtin_mul_overflow(s, std::max<int64_t>(shape[order[i]], 1), &s)) s = INT64_MAX;
  }
  return strides;
}

}  // namespace

absl::StatusOr<DimVector> OutputStridesFor(absl::Span<const TensorView> inputs,
                                           const OutputOptions& output) {
  absl::InlinedVector<const DimVector*, kMaxOperands> shapes;
  for (const TensorView& v : inputs) shapes.push_back(&v.shape);
  auto out_shape = BroadcastShapes(shapes);
  if (!out_shape.ok()) return out_shape.status();
  return OutputStrides(*out_shape, output, inputs);
}

DType ResultType(absl::Span<const TypeOperand> operands) {
  std::optional<DType> tier[3];
  for (const TypeOperand& o : operands) {
    std::optional<DType>& r = tier[static_cast<int>(o.tier)];
    r = r ? PromoteTypes(*r, o.dtype) : o.dtype;
  }
  std::optional<DType> result;
  for (int t = 2; t >= 0; --t) {  // dimensioned first, then zero-dim, then wrapped numbers
    if (!tier[t]) continue;
    if (!result) {
      result = tier[t];
    } else if (Category(*tier[t]) > Category(*result)) {
      result = PromoteTypes(*result, *tier[t]);
    }
  }
  return result.value_or(DType::kFloat32);
}

DType ResultType(absl::Span<const TensorView> inputs, int skip) {
  absl::InlinedVector<TypeOperand, kMaxOperands> operands;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (static_cast<int>(i) == skip) continue;
    operands.push_back(
        {inputs[i].dtype, inputs[i].shape.empty() ? TypeTier::kZeroDim : TypeTier::kDimensioned});
  }
  return ResultType(operands);
}

absl::StatusOr<const CatalogEntry*> LookupOp(absl::string_view name, int inputs) {
  if (const CatalogEntry* e = FindOp(name, inputs)) return e;
  if (FindOp(name) != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("op '", name, "' takes ", AritiesOf(name), ", got ", inputs));
  }
  std::vector<std::string> names;
  // Each name once (a name's forms of different arities are neighbours in the catalog).
  for (const CatalogEntry& e : Catalog()) {
    if (names.empty() || names.back() != e.spec.name) names.push_back(e.spec.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown op '", name, "' (ops: ", absl::StrJoin(names, ", "), ")"));
}

void OperandBases(const Plan& plan, std::byte* out, absl::Span<const std::byte* const> inputs,
                  char** base) {
  base[0] = reinterpret_cast<char*>(out) + plan.offsets[0];
  for (size_t i = 0; i < inputs.size(); ++i) {
    base[i + 1] = const_cast<char*>(reinterpret_cast<const char*>(inputs[i])) + plan.offsets[i + 1];
  }
}

void OperandBases(const Plan& plan, std::byte* out, absl::Span<const TensorView> inputs,
                  char** base) {
  const std::byte* data[kMaxOperands - 1] = {};
  for (size_t i = 0; i < inputs.size() && i < std::size(data); ++i) data[i] = inputs[i].data;
  OperandBases(plan, out, absl::MakeConstSpan(data, std::min(inputs.size(), std::size(data))),
               base);
}

absl::StatusOr<PreparedOp> PrepareOp(absl::string_view name, absl::Span<const TensorView> inputs,
                                     const AttrMap& attrs, const OutputOptions& output,
                                     TileRule tiles) {
  auto entry = LookupOp(name, static_cast<int>(inputs.size()));
  if (!entry.ok()) return entry.status();
  for (size_t i = 0; i < inputs.size(); ++i) {
    // The label is built only for a view that fails: this runs on every call, and a small
    // op's whole run takes about a microsecond.
    if (!ValidateView(inputs[i], "").ok())
      return ValidateView(inputs[i], absl::StrCat("input ", i));
  }
  return PrepareValidated(**entry, inputs, attrs, output, tiles);
}

absl::StatusOr<OpTypes> ResolveOpTypes(const OpSpec& spec, DType result, const Attrs& attrs,
                                       absl::Span<const DType> args) {
  if (!Accepts(spec, result)) {
    std::vector<absl::string_view> given;
    for (DType d : args) given.push_back(DTypeName(d));
    return absl::InvalidArgumentError(absl::StrCat(
        "op '", spec.name, "' does not accept dtype ", DTypeName(result),
        " (arguments: ", absl::StrJoin(given, ", "), "); it accepts: ", DTypeNames(spec.dtypes)));
  }
  if (spec.check != nullptr) {
    if (auto s = spec.check(attrs, result); !s.ok()) return s;
  }
  OpTypes t{result, result, result};
  switch (spec.rule) {
    case TypeRule::kPromote:
      break;
    case TypeRule::kPromoteToFloat:
      if (!IsFloating(result)) t.compute = t.out = DType::kFloat32;
      break;
    case TypeRule::kBoolToInt64:
      if (result == DType::kBool) t.compute = t.out = DType::kInt64;
      break;
    case TypeRule::kToBool:
      t.out = DType::kBool;
      break;
    case TypeRule::kCastToAttr:
      t.out = attrs.Type("dtype");
      // Computed in the wider of the two (the same values: the functor is the identity and
      // either conversion is the cast's own), so that the cast row kernel sizes a thread's
      // run of elements by the wider side (a widening cast to an 8-byte type writes 16 bytes
      // a run, not 64), and a number is converted to the target once.
      if (ItemSize(t.out) > ItemSize(t.compute)) t.compute = t.out;
      break;
    case TypeRule::kQuantized:
      for (size_t k = 0; k < args.size(); ++k) {
        if (static_cast<int>(k) != spec.condition_input && args[k] != result) {
          return absl::InvalidArgumentError(absl::StrCat(
              "op '", spec.name, "' needs arguments of one dtype (int8 or uint8), got ",
              DTypeName(args[0]), " and ", DTypeName(args[k])));
        }
      }
      break;
  }
  return t;
}

PreparedOp PreparedOp::Of(const CatalogEntry* op, Attrs attrs, DType result_type, Plan plan,
                          std::shared_ptr<const expr::Program> expression) {
  PreparedOp p;
  p.op = op;
  p.attrs = std::move(attrs);
  p.result_type = result_type;
  p.plan = std::move(plan);
  p.expression = std::move(expression);
  return p;
}

absl::StatusOr<PreparedOp> PrepareValidated(const CatalogEntry& entry,
                                            absl::Span<const TensorView> inputs,
                                            const AttrMap& attrs, const OutputOptions& output,
                                            TileRule tiles) {
  const OpSpec& spec = entry.spec;
  if (static_cast<int>(inputs.size()) != spec.arity) {
    return absl::InvalidArgumentError(
        absl::StrCat("op '", spec.name, "' takes ", spec.arity, " inputs, got ", inputs.size()));
  }
  if (spec.condition_input >= 0 && inputs[spec.condition_input].dtype != DType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op '", spec.name, "': input ", spec.condition_input,
        " is the condition and must be bool, not ", DTypeName(inputs[spec.condition_input].dtype)));
  }
  auto resolved = Attrs::Resolve(spec.name, spec.attrs, attrs);
  if (!resolved.ok()) return resolved.status();
  const DType result_type = ResultType(inputs, spec.condition_input);
  absl::InlinedVector<DType, 3> args;
  for (const TensorView& v : inputs) args.push_back(v.dtype);
  auto types = ResolveOpTypes(spec, result_type, *resolved, args);
  if (!types.ok()) return types.status();
  const DType compute = types->compute;
  DType out = types->out;
  if (output.dtype && *output.dtype != out) {
    if (spec.rule == TypeRule::kQuantized || spec.rule == TypeRule::kCastToAttr ||
        !CanCast(out, *output.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op '", spec.name, "' gives ", DTypeName(out), "; storing it as ",
          DTypeName(*output.dtype),
          spec.rule == TypeRule::kQuantized || spec.rule == TypeRule::kCastToAttr
              ? " is not supported by this op"
              : " would be an unsafe cast: apply op 'cast' to the result to ask for it"));
    }
    out = *output.dtype;
  }

  auto out_strides = OutputStridesFor(inputs, output);
  if (!out_strides.ok()) return out_strides.status();
  auto plan =
      PlanElementwise(inputs, compute, out, *out_strides, spec.rule == TypeRule::kToBool, tiles,
                      /*converting_tiles=*/(spec.converting_tiles & DTypeBit(compute)) != 0);
  if (!plan.ok()) return plan.status();
  return PreparedOp::Of(&entry, *std::move(resolved), result_type, *std::move(plan));
}

}  // namespace tc
