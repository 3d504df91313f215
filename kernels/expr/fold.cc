// FoldConstants (kernels/expr/typing.h): calls on literals alone, evaluated once on the host
// with the ops' own CPU kernels (EvaluateElement), the way Python evaluates arithmetic on numbers.
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/expr/typing.h"
#include "kernels/scalar_types.h"

namespace tc::expr {
namespace {

absl::Status At(const Node& n, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("expression: at ", n.position, ": ", message));
}

bool Named(const Node& call, std::initializer_list<absl::string_view> names) {
  for (absl::string_view name : names) {
    if (call.op->spec.name == name) return true;
  }
  return false;
}

bool IsNumber(const Node& n) { return n.kind == NodeKind::kLiteral && !n.zero_dim; }

bool IsZero(const Node& n) {
  return n.literal == LiteralKind::kFloat ? n.float_value == 0 : n.int_value == 0;
}

// Python's meaning of an operator on numbers, where the op's own would differ: bools count
// as integers in arithmetic, an integer to a negative integer power is a float, and what
// Python raises for is refused.
absl::Status AsPython(const Node& call, std::vector<Node>& args) {
  if (Named(call, {"add", "sub", "mul", "floor_divide", "remainder", "fmod", "pow", "neg", "abs",
                   "bitwise_not", "left_shift", "right_shift"})) {
    for (Node& a : args) {
      if (IsNumber(a) && a.literal == LiteralKind::kBool) a.literal = LiteralKind::kInt;
    }
  }
  if (Named(call, {"logical_and", "logical_or"})) {
    for (const Node& a : args) {
      if (IsNumber(a) && a.literal != LiteralKind::kBool) {
        return At(call, absl::StrCat("'", call.op->spec.name,
                                     "' (and, or) over numbers takes True and False only: "
                                     "Python's would give one of the numbers back"));
      }
    }
  }
  if (args.size() == 2 && IsNumber(args[1])) {
    const Node& b = args[1];
    if (Named(call, {"div", "floor_divide", "remainder", "fmod"}) && IsZero(b)) {
      return At(call, absl::StrCat("division by zero in '", call.op->spec.name,
                                   "' of two numbers (Python raises ZeroDivisionError)"));
    }
    if (Named(call, {"left_shift", "right_shift"}) && b.literal != LiteralKind::kFloat &&
        b.int_value < 0) {
      return At(call, "a negative shift count (Python raises ValueError)");
    }
    const bool negative = b.literal == LiteralKind::kFloat ? b.float_value < 0 : b.int_value < 0;
    if (Named(call, {"pow"}) && IsNumber(args[0]) && IsZero(args[0]) && negative) {
      return At(call, "zero to a negative power (Python raises ZeroDivisionError)");
    }
    if (Named(call, {"pow"}) && IsNumber(args[0]) && args[0].literal == LiteralKind::kInt &&
        b.literal == LiteralKind::kInt && b.int_value < 0) {
      for (Node& a : args) {
        a.float_value = static_cast<double>(a.int_value);
        a.literal = LiteralKind::kFloat;
      }
    }
  }
  return absl::OkStatus();
}

// Whether Python's value of an integer op on numbers lies past 64 bits (Python's integers do
// not wrap, so the int64 kernel's wrapped value is not Python's): the exact value in 128 bits,
// an overflow of those counting as past 64 bits too. The attributes (alpha, value) are whole
// numbers here (the op's check), at most 2**53.
bool PastInt64(const Node& call, const Attrs& attrs, const std::vector<Node>& args) {
  using I = __int128;
  auto v = [&](size_t k) -> I { return args[k].int_value; };
  auto whole = [&](const char* name) -> I { return static_cast<I>(attrs.Float(name)); };
  I r = 0;
  bool over = false;
  if (Named(call, {"add", "sub"})) {
    I scaled = 0;
    over = __builtin_mul_overflow(whole("alpha"), v(1), &scaled) ||
           (Named(call, {"add"}) ? __builtin_add_overflow(v(0), scaled, &r)
                                 : __builtin_sub_overflow(v(0), scaled, &r));
  } else if (Named(call, {"mul"})) {
    over = __builtin_mul_overflow(v(0), v(1), &r);
  } else if (Named(call, {"square"})) {
    over = __builtin_mul_overflow(v(0), v(0), &r);
  } else if (Named(call, {"addcmul"})) {
    over = __builtin_mul_overflow(v(1), v(2), &r) ||
           __builtin_mul_overflow(whole("value"), r, &r) || __builtin_add_overflow(v(0), r, &r);
  } else if (Named(call, {"neg"})) {
    r = -v(0);
  } else if (Named(call, {"abs"})) {
    r = v(0) < 0 ? -v(0) : v(0);
  } else if (Named(call, {"floor_divide"})) {
    r = v(0) == INT64_MIN && v(1) == -1 ? -v(0) : 0;
  } else if (Named(call, {"pow"})) {
    r = 1;
    I base = v(0);
    for (int64_t e = args[1].int_value; e > 0 && !over; e >>= 1) {
      if (e & 1) over = __builtin_mul_overflow(r, base, &r);
      if (e > 1 && !over) over = __builtin_mul_overflow(base, base, &base);
      over = over || r > INT64_MAX || r < INT64_MIN;
    }
  } else if (Named(call, {"left_shift"})) {
    const int64_t c = args[1].int_value;
    over =
        args[0].int_value != 0 && (c >= 63 || (args[0].int_value << c) >> c != args[0].int_value);
  }
  return over || r > INT64_MAX || r < INT64_MIN;
}

// Runs `call` over its literal arguments, typed `t`, into a literal.
absl::StatusOr<Node> Evaluate(const Node& call, const std::vector<Node>& args, const NodeType& t) {
  // Numbers compute as Python does, in float64 where the value is a float, each taken at its
  // Python value (a cast of one converts that value to the dtype once, as torch.tensor(0.1,
  // dtype=...) does); a value involving a zero-dimensional tensor (a folded cast) as the op
  // computes it.
  bool numbers = true;
  for (const Node& a : args) numbers = numbers && IsNumber(a);
  const bool python = t.tier == TypeTier::kWrappedNumber;
  auto wide = [&](DType d) { return numbers && IsFloating(d) ? DType::kFloat64 : d; };
  auto wide_out = [&](DType d) { return python ? wide(d) : d; };
  DType compute = wide(t.compute);
  if ((call.op->compute_types & DTypeBit(compute)) == 0) compute = t.compute;
  NodeType computed = t;
  computed.compute = compute;
  DType arg_dtypes[kMaxOperands - 1];
  for (size_t k = 0; k < args.size(); ++k) {
    const Node& a = args[k];
    arg_dtypes[k] = a.zero_dim ? *a.zero_dim : LiteralTarget(call, computed, static_cast<int>(k));
  }
  PreparedOp op = PreparedOp::Of(
      call.op, t.attrs, wide(t.result),
      PlanDenseRun(compute, wide_out(t.dtype), absl::MakeConstSpan(arg_dtypes, args.size())));
  Plan& plan = op.plan;
  plan.sizes[0] = plan.numel = 1;
  uint64_t values[kMaxOperands] = {};
  char* operand[kMaxOperands];
  operand[0] = reinterpret_cast<char*>(&values[0]);
  plan.strides[0][0] = ItemSize(plan.dtypes[0]);
  for (size_t k = 0; k < args.size(); ++k) {
    values[k + 1] = LiteralBits(args[k], arg_dtypes[k]);
    operand[k + 1] = reinterpret_cast<char*>(&values[k + 1]);
    plan.strides[k + 1][0] = 0;
  }
  if (auto s = EvaluateElement(op, operand); !s.ok()) {
    return At(call, s.message());
  }

  Node out;
  out.kind = NodeKind::kLiteral;
  out.position = call.position;
  if (!python) out.zero_dim = t.dtype;
  VisitDType(plan.out_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v;
    std::memcpy(&v, &values[0], sizeof(T));
    if constexpr (std::is_same_v<T, bool>) {
      out.literal = LiteralKind::kBool;
      out.int_value = v ? 1 : 0;
    } else if constexpr (std::is_integral_v<T>) {
      out.literal = LiteralKind::kInt;
      out.int_value = static_cast<int64_t>(v);
    } else {
      out.literal = LiteralKind::kFloat;
      out.float_value = static_cast<double>(static_cast<OpMath<T>>(v));
    }
  });
  if (python && out.literal == LiteralKind::kInt) {
    if (PastInt64(call, t.attrs, args)) {
      return At(call,
                absl::StrCat("'", call.op->spec.name, "' of these numbers does not fit 64 bits"));
    }
  }
  return out;
}

}  // namespace

absl::Status FoldConstants(Expression* e) {
  std::vector<Node> out;
  std::vector<int> moved(e->nodes.size(), -1);
  for (size_t i = 0; i < e->nodes.size(); ++i) {
    Node n = std::move(e->nodes[i]);
    for (int& a : n.args) a = moved[static_cast<size_t>(a)];
    bool constant = n.kind == NodeKind::kCall;
    for (int a : n.args)
      constant = constant && out[static_cast<size_t>(a)].kind == NodeKind::kLiteral;
    if (!constant) {
      out.push_back(std::move(n));
      moved[i] = static_cast<int>(out.size()) - 1;
      continue;
    }
    // The arguments, one literal each, are the last nodes (post-order).
    std::vector<Node> args;
    for (size_t k = 0; k < n.args.size(); ++k) {
      if (n.args[k] != static_cast<int>(out.size() - n.args.size() + k)) {
        return absl::InternalError("expression: a tree not in post-order");
      }
      args.push_back(out[static_cast<size_t>(n.args[k])]);
    }
    out.resize(out.size() - args.size());
    if (auto s = AsPython(n, args); !s.ok()) return s;
    Expression one;
    one.nodes = args;
    Node call = n;
    for (size_t k = 0; k < args.size(); ++k) call.args[k] = static_cast<int>(k);
    one.nodes.push_back(call);
    auto types = TypeCheck(one, {});
    if (!types.ok()) return types.status();
    auto folded = Evaluate(n, args, types->back());
    if (!folded.ok()) return folded.status();
    out.push_back(*std::move(folded));
    moved[i] = static_cast<int>(out.size()) - 1;
  }
  e->nodes = std::move(out);
  return absl::OkStatus();
}

}  // namespace tc::expr
