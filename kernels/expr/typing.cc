#include "kernels/expr/typing.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "kernels/op_types.h"

namespace tc::expr {
namespace {

absl::Status At(const Node& n, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("expression: at ", n.position, ": ", message));
}

// Whether integer literal `v` may be computed as `t`. As PyTorch's overflow check: within the
// type's range, and for unsigned types negative values down to -max (they wrap, so that
// `x - 1` and `x + (-1)` agree).
bool IntFits(int64_t v, DType t) {
  bool fits = true;
  VisitDType(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const int64_t hi = static_cast<int64_t>(std::numeric_limits<T>::max());
      if constexpr (std::is_unsigned_v<T>) {
        fits = v <= hi && v >= -hi;
      } else {
        fits = v >= static_cast<int64_t>(std::numeric_limits<T>::min()) && v <= hi;
      }
    }
  });
  return fits;
}

}  // namespace

DType LiteralTarget(const Node& call, const NodeType& type, int arg) {
  return arg == call.op->spec.condition_input ? DType::kBool : type.compute;
}

uint64_t LiteralBits(const Node& literal, DType target) {
  uint64_t bits = 0;
  VisitDType(target, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = literal.literal == LiteralKind::kFloat ? Convert<T>(literal.float_value)
                : literal.literal == LiteralKind::kInt ? Convert<T>(literal.int_value)
                                                       : Convert<T>(literal.int_value != 0);
    std::memcpy(&bits, &v, sizeof(T));
  });
  return bits;
}

absl::StatusOr<std::vector<NodeType>> TypeCheck(const Expression& e,
                                                absl::Span<const TypeOperand> inputs) {
  std::vector<NodeType> types(e.nodes.size());
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const Node& n = e.nodes[i];
    NodeType& t = types[i];
    switch (n.kind) {
      case NodeKind::kInput:
        if (n.input < 0 || n.input >= static_cast<int>(inputs.size())) {
          return At(n, absl::StrCat("input ", n.input, " was not sent"));
        }
        t.dtype = inputs[n.input].dtype;
        t.tier = inputs[n.input].tier;
        continue;
      case NodeKind::kLiteral:
        if (n.zero_dim) {
          t.tier = TypeTier::kZeroDim;
          t.dtype = *n.zero_dim;
          continue;
        }
        t.tier = TypeTier::kWrappedNumber;
        t.dtype = n.literal == LiteralKind::kBool  ? DType::kBool
                  : n.literal == LiteralKind::kInt ? DType::kInt64
                                                   : DType::kFloat32;
        continue;
      case NodeKind::kCall:
        break;
    }
    const OpSpec& spec = n.op->spec;
    auto attrs = Attrs::Resolve(spec.name, spec.attrs, n.attrs);
    if (!attrs.ok()) return At(n, attrs.status().message());
    t.attrs = *std::move(attrs);
    absl::InlinedVector<TypeOperand, 3> operands;
    t.tier = TypeTier::kWrappedNumber;
    for (size_t k = 0; k < n.args.size(); ++k) {
      const NodeType& a = types[static_cast<size_t>(n.args[k])];
      t.tier = std::max(t.tier, a.tier);
      if (static_cast<int>(k) == spec.condition_input) {
        if (a.dtype != DType::kBool) {
          return At(e.at(n.args[k]),
                    absl::StrCat("the condition of '", spec.name, "' must be bool, not ",
                                 DTypeName(a.dtype), " (compare it, e.g. x != 0)"));
        }
        continue;
      }
      operands.push_back({a.dtype, a.tier});
    }
    t.result = ResultType(operands);
    absl::InlinedVector<DType, 3> args;
    for (int k : n.args) args.push_back(types[static_cast<size_t>(k)].dtype);
    auto resolved = ResolveOpTypes(spec, t.result, t.attrs, args);
    if (!resolved.ok()) return At(n, resolved.status().message());
    t.compute = resolved->compute;
    t.dtype = resolved->out;
    // A cast of numbers is a zero-dimensional tensor of its dtype, not a Python number.
    if (spec.rule == TypeRule::kCastToAttr && t.tier == TypeTier::kWrappedNumber) {
      t.tier = TypeTier::kZeroDim;
    }
    for (size_t k = 0; k < n.args.size(); ++k) {
      const Node& a = e.at(n.args[k]);
      if (a.kind != NodeKind::kLiteral || a.zero_dim || a.literal != LiteralKind::kInt) continue;
      const DType target = LiteralTarget(n, t, static_cast<int>(k));
      if (k == 1 && spec.name == "pow" && IsIntegral(t.compute) && a.int_value < 0) {
        return At(a, absl::StrCat("an integer to a negative integer power (", a.int_value,
                                  ") is refused, as PyTorch refuses it: write a float "
                                  "exponent, or cast the base to a float"));
      }
      if (IsIntegral(target) && !IntFits(a.int_value, target)) {
        return At(a, absl::StrCat(a.int_value, " does not fit ", DTypeName(target), ", the type '",
                                  spec.name, "' computes in here"));
      }
    }
  }
  return types;
}

}  // namespace tc::expr
