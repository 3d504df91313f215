// Expressions on the CPU backend (or, with TC_TEST_BACKEND=cuda, on GPU 0: kernels generated
// and compiled at run time, checked against the GPU's own op kernels; TC_TEST_EXPR_STEPS=
// always runs every expression as its ops one by one instead, as a new one runs while its
// kernel compiles, and while_compiling mixes both as the server does): typing (PyTorch's promotion
// with Python scalars, the catalog's checks at the right position), and evaluation against two
// references: the same tree run op by op through the engine (bit for bit, over random trees, dtypes
// and layouts: broadcasts, permutations, negative strides, misaligned offsets, short and long
// rows), and hand-written double arithmetic for fixed expressions (one rounding at the output).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/expr/program.h"
#include "tests/support/cpu_backend.h"
#if TC_WITH_CUDA
#include "kernels/cuda/expr_kernels.h"
#include "kernels/rtc/codegen.h"
#include "runtime/cuda_device.h"
#include "tests/support/device_backend.h"
#endif
#include "tests/support/random_tensors.h"
#include "tests/support/reference.h"

namespace tc::expr {
namespace {

using testing::OwnedTensor;

OwnedTensor Contiguous(DType dtype, const DimVector& shape) {
  OwnedTensor t;
  t.view.dtype = dtype;
  t.view.shape = shape;
  t.view.strides = ContiguousStrides(shape);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  t.storage.assign(static_cast<size_t>(n * ItemSize(dtype)), 0);
  t.view.storage_bytes = static_cast<int64_t>(t.storage.size());
  t.view.data = t.Data();
  return t;
}

// Random values that keep every op of the random trees finite and exact enough: small
// integers, floats in [-4, 4], bools.
testing::ElementWriter Filler(DType dtype, std::mt19937_64& rng) {
  return [dtype, &rng](char* p) {
    ref::Value v;
    if (dtype == DType::kBool) {
      v.is_int = true;
      v.i = static_cast<int64_t>(rng() % 2);
    } else if (IsFloating(dtype)) {
      v.f = ref::RoundToFloat(dtype, std::uniform_real_distribution<double>(-4, 4)(rng));
    } else {
      v.is_int = true;
      v.i = static_cast<int64_t>(rng() % 15) - (dtype == DType::kUInt8 ? 0 : 7);
    }
    ref::Write(dtype, v, p);
  };
}

constexpr DType kAllDTypes[] = {DType::kBool,    DType::kUInt8,  DType::kInt8,    DType::kInt16,
                                DType::kInt32,   DType::kInt64,  DType::kFloat16, DType::kBFloat16,
                                DType::kFloat32, DType::kFloat64};

// The backend every test here runs on, expressions and their op-by-op references alike. With
// TC_TEST_BACKEND=cuda, TC_TEST_SMALL_FIRST=1 runs what fits the way the server runs small
// requests (Device::TryRunSmall: one copy each way, an expression whose kernel is compiled
// included).
Backend& TestBackend() {
#if TC_WITH_CUDA
  const char* which = std::getenv("TC_TEST_BACKEND");
  if (which != nullptr && std::string(which) == "cuda") {
    static Backend* gpu = [] {
      auto d = runtime::CudaDevice::Create(0, {});
      if (!d.ok()) {
        std::fprintf(stderr, "TC_TEST_BACKEND=cuda: %s\n", d.status().ToString().c_str());
        std::abort();
      }
      // Kernels only, unless told.
      const char* steps = std::getenv("TC_TEST_EXPR_STEPS");
      const std::string mode = steps == nullptr ? "never" : steps;
      cuda::ExprKernelCache::Shared().SetStepMode(mode == "always" ? cuda::StepMode::kAlways
                                                  : mode == "while_compiling"
                                                      ? cuda::StepMode::kWhileCompiling
                                                      : cuda::StepMode::kNever);
      const char* small = std::getenv("TC_TEST_SMALL_FIRST");
      return new runtime::DeviceBackend(d->release(),
                                        small != nullptr && std::string(small) == "1");
    }();
    return *gpu;
  }
#endif
  static Backend* cpu = new CpuBackend(2);
  return *cpu;
}

// What a failure on the GPU needs to be read: the kernel generated for the expression
// (with host pointers standing in for the device's, so its walk may differ) and the inputs'
// layouts.
std::string Explain(const PreparedOp& p, const std::vector<OwnedTensor>& in) {
  std::string s;
  for (const OwnedTensor& t : in) {
    s += std::string(DTypeName(t.view.dtype)) + ShapeToString(t.view.shape) + " strides " +
         ShapeToString(t.view.strides) + "\n";
  }
#if TC_WITH_CUDA
  if (TestBackend().name() != "cpu" && p.expression != nullptr) {
    std::vector<char*> base(in.size() + 1, nullptr);
    for (size_t k = 0; k < in.size(); ++k)
      base[k + 1] = const_cast<char*>(
          in[k].view.data ? reinterpret_cast<const char*>(in[k].view.data) : nullptr);
    s += rtc::GenerateSource(*p.expression, expr::VectorFor(*p.expression, base.data()));
  }
#else
  (void)p;
#endif
  return s;
}

absl::StatusOr<PreparedOp> Prepare(const std::string& text, const std::vector<OwnedTensor>& in,
                                   const OutputOptions& output = {}) {
  std::vector<TensorView> views;
  for (const OwnedTensor& t : in) views.push_back(t.view);
  return PrepareExpression(text, {}, views, output);
}

// Runs a prepared expression; the output as a tensor with the plan's strides.
OwnedTensor Evaluate(const PreparedOp& p, const std::vector<OwnedTensor>& in,
                     absl::Status* status) {
  Backend& backend = TestBackend();
  OwnedTensor out;
  out.view.dtype = p.plan.out_dtype;
  out.view.shape = p.plan.out_shape;
  out.view.strides = p.plan.out_strides;
  out.storage.assign(static_cast<size_t>(p.plan.out_storage_bytes), 0);
  out.view.storage_bytes = p.plan.out_storage_bytes;
  out.view.data = out.Data();
  std::vector<TensorView> views;
  for (const OwnedTensor& t : in) views.push_back(t.view);
  *status = backend.Run(p, views, reinterpret_cast<std::byte*>(out.storage.data()));
  return out;
}

DType TypeOf(const std::string& text, const std::vector<OwnedTensor>& in) {
  auto p = Prepare(text, in);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status();
  return p.ok() ? p->plan.out_dtype : DType::kBool;
}

std::string Error(const std::string& text, const std::vector<OwnedTensor>& in,
                  const OutputOptions& output = {}) {
  auto p = Prepare(text, in, output);
  if (p.ok()) return "";
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << text;
  return std::string(p.status().message());
}

TEST(ExprTyping, PromotesLikePyTorchWithPythonScalars) {
  const OwnedTensor f16 = Contiguous(DType::kFloat16, {4}), f32 = Contiguous(DType::kFloat32, {4}),
                    i8 = Contiguous(DType::kInt8, {4}), i32 = Contiguous(DType::kInt32, {4}),
                    u8 = Contiguous(DType::kUInt8, {4}), b = Contiguous(DType::kBool, {4}),
                    f64_0d = Contiguous(DType::kFloat64, {}),
                    i64_0d = Contiguous(DType::kInt64, {});
  EXPECT_EQ(TypeOf("a * 2.5", {f16}), DType::kFloat16);
  EXPECT_EQ(TypeOf("a + 1.5", {i8}), DType::kFloat32);  // a float scalar: the default float
  EXPECT_EQ(TypeOf("a + 100", {i8}), DType::kInt8);
  EXPECT_EQ(TypeOf("a + True", {i8}), DType::kInt8);
  EXPECT_EQ(TypeOf("a + 1", {b}), DType::kInt64);
  EXPECT_EQ(TypeOf("a * b", {f16, f64_0d}), DType::kFloat16);  // zero-dim: same category
  EXPECT_EQ(TypeOf("a * b", {i32, f64_0d}), DType::kFloat64);  // zero-dim: higher category
  EXPECT_EQ(TypeOf("a * b", {i8, i64_0d}), DType::kInt8);
  EXPECT_EQ(TypeOf("a / 2", {i32}), DType::kFloat32);
  EXPECT_EQ(TypeOf("a > 0", {f16}), DType::kBool);
  EXPECT_EQ(TypeOf("where(a > 0, b, 0.5)", {f32, f16}), DType::kFloat16);
  EXPECT_EQ(TypeOf("cast(a, float64) + b", {f16, f32}), DType::kFloat64);
  EXPECT_EQ(TypeOf("a - 1", {u8}), DType::kUInt8);
  EXPECT_EQ(TypeOf("a + (-255)", {u8}), DType::kUInt8);  // unsigned wrap, as PyTorch allows
  EXPECT_EQ(TypeOf("a", {i32}), DType::kInt32);
}

TEST(ExprTyping, RefusesWhatTheOpsRefuseAtTheirPosition) {
  const OwnedTensor f32 = Contiguous(DType::kFloat32, {4}), i8 = Contiguous(DType::kInt8, {4}),
                    u8 = Contiguous(DType::kUInt8, {4});
  EXPECT_EQ(Error("a + 300", {i8}),
            "expression: at 4: 300 does not fit int8, the type 'add' computes in here");
  EXPECT_EQ(Error("a + (-256)", {u8}),
            "expression: at 5: -256 does not fit uint8, the type 'add' computes in here");
  EXPECT_EQ(Error("sqrt(a) & 1", {f32}),
            "expression: at 0: op 'bitwise_and' does not accept dtype float32 (arguments: "
            "float32, int64); it accepts: bool, uint8, int8, int16, int32, int64");
  EXPECT_EQ(Error("where(a, a, 1)", {f32}),
            "expression: at 6: the condition of 'where' must be bool, not float32 (compare it, "
            "e.g. x != 0)");
  EXPECT_EQ(Error("a * 2", {f32, f32}),
            "expression: input 1 ('b') is not used; send only the inputs the expression names");
  EXPECT_EQ(Error("a + b", {f32}), "expression: at 4: 'b' names no input (inputs: a)");
  OutputOptions to_int;
  to_int.dtype = DType::kInt32;
  EXPECT_EQ(Error("a * 2", {f32}, to_int),
            "the expression gives float32; storing it as int32 would be an unsafe cast: write "
            "cast(..., int32) in the expression to ask for it");
  EXPECT_EQ(Error("a + b", {Contiguous(DType::kFloat32, {3}), Contiguous(DType::kFloat32, {4})}),
            "shapes [3] and [4] cannot be broadcast together: dim -1 is 3 in one and 4 in another "
            "(sizes must match or be 1)");
}

// One call of every op of the catalog over arguments of every combination of dtypes (and,
// for an attribute that is a dtype, every one): the expression's typing and the engine
// preparing the op alone accept and refuse the same, and agree on the result, compute and
// output dtypes. (They are one function now, ResolveOpTypes; this holds them to it. The
// copies they were once diverged for cast: the engine computed a widening cast in the wider
// type, the expression in the narrower.)
TEST(ExprTyping, AgreesWithTheEngineOnEveryOpAndDtype) {
  int compared = 0, refused = 0;
  for (const CatalogEntry& entry : Catalog()) {
    const OpSpec& spec = entry.spec;
    std::vector<AttrMap> attr_sets = {AttrMap{}};
    for (const AttrSpec& a : spec.attrs) {
      if (!a.required) continue;
      std::vector<AttrMap> next;
      for (const AttrMap& m : attr_sets) {
        if (a.type == AttrType::kDType) {
          for (int d = 0; d < kNumDTypes; ++d) {
            AttrMap with = m;
            with[a.name] = static_cast<DType>(d);
            next.push_back(with);
          }
          continue;
        }
        AttrMap with = m;
        switch (a.type) {
          case AttrType::kFloat:
            with[a.name] = 0.5;
            break;
          case AttrType::kInt:
            with[a.name] = int64_t{1};
            break;
          case AttrType::kBool:
            with[a.name] = false;
            break;
          case AttrType::kString:
            with[a.name] = std::string();
            break;
          case AttrType::kDType:
            break;
        }
        next.push_back(with);
      }
      attr_sets = std::move(next);
    }
    int combos = 1;
    for (int k = 0; k < spec.arity; ++k) combos *= kNumDTypes;
    for (int c = 0; c < combos; ++c) {
      std::vector<OwnedTensor> in;
      std::vector<TensorView> views;
      std::vector<TypeOperand> operands;
      Expression e;
      Node call;
      call.kind = NodeKind::kCall;
      call.op = &entry;
      for (int k = 0, rest = c; k < spec.arity; ++k, rest /= kNumDTypes) {
        const DType d = static_cast<DType>(rest % kNumDTypes);
        in.push_back(Contiguous(d, {1}));
        operands.push_back({d, TypeTier::kDimensioned});
        Node input;
        input.kind = NodeKind::kInput;
        input.input = k;
        e.nodes.push_back(input);
        call.args.push_back(k);
      }
      for (const OwnedTensor& t : in) views.push_back(t.view);
      for (const AttrMap& attrs : attr_sets) {
        call.attrs = attrs;
        e.nodes.resize(static_cast<size_t>(spec.arity));
        e.nodes.push_back(call);
        auto prepared = PrepareOp(spec.name, views, attrs);
        auto types = TypeCheck(e, operands);
        std::string what = std::string(spec.name) + "(";
        for (const TypeOperand& o : operands) what += std::string(DTypeName(o.dtype)) + " ";
        for (const auto& [name, v] : attrs) what += name + "=" + AttrValueToString(v) + " ";
        what += ")";
        ASSERT_EQ(prepared.ok(), types.ok())
            << what << ": engine " << prepared.status() << ", expression "
            << (types.ok() ? absl::OkStatus() : types.status());
        if (!prepared.ok()) {
          ++refused;
          continue;
        }
        const NodeType& t = types->back();
        EXPECT_EQ(prepared->result_type, t.result) << what;
        EXPECT_EQ(prepared->plan.compute_dtype, t.compute) << what;
        EXPECT_EQ(prepared->plan.out_dtype, t.dtype) << what;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 1000);
  EXPECT_GT(refused, 100);
}

// The random trees' ops, by the dtypes they suit (all arguments of one category).
struct TreeOp {
  const char* name;
  int arity;
};
const std::vector<TreeOp> kFloatOps = {{"add", 2},     {"sub", 2}, {"mul", 2},  {"maximum", 2},
                                       {"minimum", 2}, {"neg", 1}, {"abs", 1},  {"sigmoid", 1},
                                       {"tanh", 1},    {"sin", 1}, {"clamp", 3}};
const std::vector<TreeOp> kIntOps = {
    {"add", 2},     {"sub", 2},     {"mul", 2}, {"bitwise_and", 2}, {"bitwise_xor", 2},
    {"maximum", 2}, {"minimum", 2}, {"neg", 1}, {"abs", 1},         {"clamp", 3}};

// A random expression over `inputs` names, every input used, with literals of the inputs'
// category, comparisons feeding where() now and then (whose last argument is never a literal:
// two literal branches would make the reference's zero-dim float64 tensors decide its type).
std::string RandomTree(std::mt19937_64& rng, int inputs, bool floating, int depth,
                       std::vector<bool>& used, bool with_where = true) {
  const auto& ops = floating ? kFloatOps : kIntOps;
  auto input = [&]() -> std::string {
    int i = static_cast<int>(rng() % static_cast<uint64_t>(inputs));
    for (int k = 0; k < inputs; ++k) {  // prefer an input not used yet
      if (!used[static_cast<size_t>(k)]) {
        i = k;
        break;
      }
    }
    used[static_cast<size_t>(i)] = true;
    return std::string(1, static_cast<char>('a' + i));
  };
  auto leaf = [&]() -> std::string {
    if (rng() % 5 == 0) {
      return floating ? std::to_string(static_cast<int>(rng() % 7) - 3) + ".5"
                      : std::to_string(static_cast<int>(rng() % 7));
    }
    return input();
  };
  if (depth <= 0) return leaf();
  if (with_where && rng() % 8 == 0) {
    return "where(" + RandomTree(rng, inputs, floating, depth - 1, used) + " > " +
           RandomTree(rng, inputs, floating, depth - 1, used) + ", " +
           RandomTree(rng, inputs, floating, depth - 1, used) + ", " + input() + ")";
  }
  const TreeOp& op = ops[rng() % ops.size()];
  std::string s = std::string(op.name) + "(";
  for (int k = 0; k < op.arity; ++k) {
    if (k > 0) s += ", ";
    s += RandomTree(rng, inputs, floating, depth - 1 - static_cast<int>(rng() % 2), used,
                    with_where);
  }
  return s + ")";
}

// A random tree over every op of the catalog: inputs of mixed dtypes (some zero-dimensional),
// literals of every kind, required attributes given and optional ones now and then. Every
// call takes at least one input (calls on literals alone are Python's arithmetic, checked on
// their own below); where's condition is a comparison.
struct CatalogTree {
  std::mt19937_64& rng;
  int inputs;
  std::vector<bool> used;

  std::string Input() {
    int i = static_cast<int>(rng() % static_cast<uint64_t>(inputs));
    for (int k = 0; k < inputs; ++k) {
      if (!used[static_cast<size_t>(k)]) {
        i = k;
        break;
      }
    }
    used[static_cast<size_t>(i)] = true;
    return std::string(1, static_cast<char>('a' + i));
  }
  std::string Literal() {
    switch (rng() % 5) {
      case 0:
        return "True";
      case 1:
      case 2:
        return std::to_string(static_cast<int>(rng() % 7));
      default:
        return std::to_string(static_cast<int>(rng() % 7) - 3) + ".5";
    }
  }
  std::string Attrs(const OpSpec& spec) {
    std::string s;
    for (const AttrSpec& a : spec.attrs) {
      if (!a.required && rng() % 4 != 0) continue;
      s += ", " + a.name + "=";
      switch (a.type) {
        case AttrType::kDType:
          s += std::string(DTypeName(kAllDTypes[rng() % std::size(kAllDTypes)]));
          break;
        case AttrType::kFloat:
          s += a.required ? "0.75" : (rng() % 2 ? "2" : "-1.5");
          break;
        case AttrType::kInt:
          s += rng() % 2 ? "1" : "-2";
          break;
        case AttrType::kBool:
          s += "True";
          break;
        case AttrType::kString:
          s += "\"tanh\"";
          break;
      }
    }
    return s;
  }
  // `has_input`: whether the subtree reads an input.
  std::string Tree(int depth, bool& has_input) {
    if (depth <= 0) {
      has_input = rng() % 5 != 0;
      return has_input ? Input() : Literal();
    }
    const CatalogEntry& op = Catalog()[rng() % Catalog().size()];
    std::string s = op.spec.name + "(";
    has_input = false;
    for (int k = 0; k < op.spec.arity; ++k) {
      if (k > 0) s += ", ";
      bool arg_input = false;
      if (k == op.spec.condition_input) {
        bool x = false, y = false;
        s += "(" + Tree(depth - 2, x) + ") > (" + Tree(depth - 2, y) + ")";
        arg_input = x || y;
      } else if (k + 1 == op.spec.arity && !has_input) {
        s += Input();
        arg_input = true;
      } else {
        s += Tree(depth - 1 - static_cast<int>(rng() % 2), arg_input);
      }
      has_input = has_input || arg_input;
    }
    return s + Attrs(op.spec) + ")";
  }
};

// The reference: the tree run op by op through the engine. A literal becomes a zero-dim tensor
// of the dtype its op's arguments promote to with it as a Python scalar (the op's result type,
// which a zero-dim tensor of that dtype leaves as it is), holding the same value (the literals
// of the trees are exact in every dtype). The output dtype, if any, is a cast of the root's.
absl::StatusOr<OwnedTensor> OneByOne(const Expression& e, const std::vector<OwnedTensor>& inputs,
                                     DType out) {
  Backend& backend = TestBackend();
  std::vector<OwnedTensor> values(e.nodes.size());
  auto run = [&](absl::string_view op, const std::vector<TensorView>& args, const AttrMap& attrs,
                 OwnedTensor* result) -> absl::Status {
    auto p = PrepareOp(op, args, attrs, {}, backend.tile_rule());
    if (!p.ok()) return p.status();
    *result = Contiguous(p->plan.out_dtype, p->plan.out_shape);
    return backend.Run(*p, args, reinterpret_cast<std::byte*>(result->storage.data()));
  };
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const Node& n = e.nodes[i];
    if (n.kind == NodeKind::kInput) {
      values[i] = inputs[static_cast<size_t>(n.input)];
      continue;
    }
    if (n.kind == NodeKind::kLiteral) continue;
    std::vector<TypeOperand> operands;
    for (size_t k = 0; k < n.args.size(); ++k) {
      if (static_cast<int>(k) == n.op->spec.condition_input) continue;
      const Node& a = e.at(n.args[k]);
      if (a.kind == NodeKind::kLiteral) {
        operands.push_back({a.literal == LiteralKind::kBool  ? DType::kBool
                            : a.literal == LiteralKind::kInt ? DType::kInt64
                                                             : DType::kFloat32,
                            TypeTier::kWrappedNumber});
      } else {
        const TensorView& v = values[static_cast<size_t>(n.args[k])].view;
        operands.push_back(
            {v.dtype, v.shape.empty() ? TypeTier::kZeroDim : TypeTier::kDimensioned});
      }
    }
    const DType promoted = ResultType(operands);
    std::vector<OwnedTensor> literals(n.args.size());
    std::vector<TensorView> args;
    for (size_t k = 0; k < n.args.size(); ++k) {
      const Node& a = e.at(n.args[k]);
      if (a.kind != NodeKind::kLiteral) {
        args.push_back(values[static_cast<size_t>(n.args[k])].view);
        continue;
      }
      const DType d = static_cast<int>(k) == n.op->spec.condition_input ? DType::kBool : promoted;
      ref::Value v;
      v.is_int = a.literal != LiteralKind::kFloat;
      v.i = a.int_value;
      v.f = a.float_value;
      literals[k] = Contiguous(d, {});
      ref::Write(d, ref::ConvertTo(d, v), literals[k].storage.data());
      args.push_back(literals[k].view);
    }
    if (auto s = run(n.op->spec.name, args, n.attrs, &values[i]); !s.ok()) return s;
  }
  OwnedTensor root = values.back();
  if (root.view.dtype == out) return root;
  OwnedTensor result;
  if (auto s = run("cast", {root.view}, {{"dtype", out}}, &result); !s.ok()) return s;
  return result;
}

bool SameBits(DType t, const char* x, const char* y) {
  if (IsFloating(t)) {
    const double a = ref::Read(t, x).f, b = ref::Read(t, y).f;
    if (std::isnan(a) && std::isnan(b)) return true;
  }
  return std::memcmp(x, y, static_cast<size_t>(ItemSize(t))) == 0;
}

// The contract of the expression language: for any tree it accepts, the result equals the
// ops run one by one, bit for bit, on every backend: random trees of every op of the catalog,
// inputs of mixed dtypes and random layouts (broadcasts, permutations, negative strides,
// misaligned offsets, zero-dim inputs, short and long rows), output dtypes and layouts.
TEST(ExprEval, RandomTreesMatchTheOpsRunOneByOne) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "TC_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  const std::vector<DimVector> fixed = {{3, 2000}, {2, 3, 9000}, {2, 40000}, {700, 3}, {5000}, {1}};
  int checked = 0, refused = 0, errors = 0;
  for (int round = 0; checked < 150 && round < 2000; ++round) {
    const DType base = kAllDTypes[rng() % std::size(kAllDTypes)];
    const int ninputs = 1 + static_cast<int>(rng() % 4);
    const DimVector out_shape =
        round % 3 == 0 ? fixed[rng() % fixed.size()]
                       : testing::RandomShape(1 + static_cast<int>(rng() % 4), rng, 3000);
    CatalogTree gen{rng, ninputs, std::vector<bool>(static_cast<size_t>(ninputs), false)};
    bool has_input = false;
    std::string text = gen.Tree(1 + static_cast<int>(rng() % 4), has_input);
    if (std::find(gen.used.begin(), gen.used.end(), false) != gen.used.end()) continue;
    std::vector<OwnedTensor> in;
    std::string described;
    for (int i = 0; i < ninputs; ++i) {
      const DType dtype = rng() % 3 == 0 ? kAllDTypes[rng() % std::size(kAllDTypes)] : base;
      DimVector shape = i == 0 ? out_shape : testing::BroadcastableFrom(out_shape, rng);
      if (i > 0 && rng() % 8 == 0) shape = {};
      if (i == 0 && shape.empty()) shape = {1};
      in.push_back(testing::RandomLayout(dtype, shape, rng, Filler(dtype, rng)));
      described += " " + std::string(DTypeName(dtype)) + ShapeToString(shape);
    }
    auto p = Prepare(text, in);
    if (!p.ok()) {
      ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
      ++refused;
      continue;
    }
    OutputOptions output;
    if (rng() % 3 == 0) output.layout = OutputOptions::Layout::kLikeFirstInput;
    const DType wanted = kAllDTypes[rng() % std::size(kAllDTypes)];
    if (rng() % 3 == 0 && CanCast(p->plan.out_dtype, wanted)) output.dtype = wanted;
    p = Prepare(text, in, output);
    ASSERT_TRUE(p.ok()) << text << ": " << p.status();
    SCOPED_TRACE(text + " over" + described + " into " + std::string(DTypeName(p->plan.out_dtype)));
    absl::Status status;
    OwnedTensor got = Evaluate(*p, in, &status);
    auto e = Parse(text, DefaultInputNames(ninputs));
    ASSERT_TRUE(e.ok());
    auto want = OneByOne(*e, in, p->plan.out_dtype);
    if (!status.ok() || !want.ok()) {
      // Integer division by zero: the same error either way. (A GPU kernel names every op of
      // the tree that may raise it, "in 'floor_divide' or 'remainder'"; one op names itself.)
      ASSERT_EQ(status.code(), want.status().code()) << status << " / " << want.status();
      const std::string op = std::string(want.status().message())
                                 .substr(std::string(want.status().message()).find('\''));
      ASSERT_NE(std::string(status.message()).find(op.substr(0, op.size() - 1)), std::string::npos)
          << status << " / " << want.status();
      ++errors;
      continue;
    }
    ++checked;
    ASSERT_EQ(want->view.shape, got.view.shape);
    int bad = 0;
    testing::ForEachIndex(got.view.shape, [&](const std::vector<int64_t>& idx) {
      const char* g = testing::ElementAt(got.view, idx);
      const char* w = testing::ElementAt(want->view, idx);
      if (!SameBits(got.view.dtype, g, w) && bad++ < 3) {
        ADD_FAILURE() << "at " << ShapeToString(DimVector(idx.begin(), idx.end())) << ": got "
                      << ref::Read(got.view.dtype, g).AsDouble() << ", op by op "
                      << ref::Read(got.view.dtype, w).AsDouble();
      }
    });
    if (bad > 0) {
      ADD_FAILURE() << Explain(*p, in);
      return;
    }
  }
  // Most random trees type (the rest are refused as their ops would refuse them).
  EXPECT_EQ(checked, 150) << refused << " refused, " << errors << " errors";
}

// The independent reference: the random trees' ops written out in double and exact integer
// arithmetic, each node's value kept in the dtype as its op keeps it (wrapped to the integer
// type, rounded to the float type). Float values are checked within 64 units of rounding of
// the largest magnitude any node
// reaches at that element (each op's error stays within a few units of its result, and the
// tree has fewer than 32 nodes), plus one unit of the output's dtype. Comparisons of computed
// floats could flip within that error, so float trees here have no where(); integer trees do,
// and match exactly.
struct RefValue {
  double f = 0;
  int64_t i = 0;
};

RefValue RefCall(const std::string& op, DType t, const std::vector<RefValue>& x, bool& ok) {
  const bool fl = IsFloating(t);
  auto wrap = [&](__int128 v) { return RefValue{0, ref::Wrap(t, v)}; };
  auto fv = [&](double v) { return RefValue{v, 0}; };
  const double a = x[0].f, b = x.size() > 1 ? x[1].f : 0;
  const int64_t ia = x[0].i, ib = x.size() > 1 ? x[1].i : 0;
  if (op == "add") return fl ? fv(a + b) : wrap(static_cast<__int128>(ia) + ib);
  if (op == "sub") return fl ? fv(a - b) : wrap(static_cast<__int128>(ia) - ib);
  if (op == "mul") return fl ? fv(a * b) : wrap(static_cast<__int128>(ia) * ib);
  if (op == "maximum") return fl ? fv(std::max(a, b)) : wrap(std::max(ia, ib));
  if (op == "minimum") return fl ? fv(std::min(a, b)) : wrap(std::min(ia, ib));
  if (op == "clamp") {
    return fl ? fv(std::min(std::max(a, b), x[2].f)) : wrap(std::min(std::max(ia, ib), x[2].i));
  }
  if (op == "neg") return fl ? fv(-a) : wrap(-static_cast<__int128>(ia));
  if (op == "abs") return fl ? fv(std::fabs(a)) : wrap(ia < 0 ? -static_cast<__int128>(ia) : ia);
  if (op == "sigmoid") return fv(1 / (1 + std::exp(-a)));
  if (op == "tanh") return fv(std::tanh(a));
  if (op == "sin") return fv(std::sin(a));
  if (op == "bitwise_and") return wrap(ia & ib);
  if (op == "bitwise_xor") return wrap(ia ^ ib);
  ok = false;
  return {};
}

TEST(ExprEval, RandomTreesMatchTheDoubleReference) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "TC_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  const DType dtypes[] = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                          DType::kBFloat16, DType::kInt32,   DType::kInt8,
                          DType::kInt16,    DType::kUInt8,   DType::kInt64};
  for (int round = 0; round < 80; ++round) {
    const DType dtype = dtypes[rng() % std::size(dtypes)];
    const bool fl = IsFloating(dtype);
    // Every node's value kept in the dtype, as its op alone keeps it.
    const DType storage = dtype;
    const int ninputs = 1 + static_cast<int>(rng() % 4);
    const DimVector out_shape =
        round % 4 == 0 ? DimVector{3, 20000}
                       : testing::RandomShape(1 + static_cast<int>(rng() % 4), rng, 2000);
    std::vector<bool> used(static_cast<size_t>(ninputs), false);
    std::string text;
    do {
      std::fill(used.begin(), used.end(), false);
      text = RandomTree(rng, ninputs, fl, 1 + static_cast<int>(rng() % 5), used, !fl);
    } while (std::find(used.begin(), used.end(), false) != used.end());
    SCOPED_TRACE(text + " on " + std::string(DTypeName(dtype)) + " " + ShapeToString(out_shape));
    std::vector<OwnedTensor> in;
    for (int i = 0; i < ninputs; ++i) {
      DimVector shape = i == 0 ? out_shape : testing::BroadcastableFrom(out_shape, rng);
      if (shape.empty()) shape = {1};
      in.push_back(testing::RandomLayout(dtype, shape, rng, Filler(dtype, rng)));
    }
    auto p = Prepare(text, in);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ(p->plan.out_dtype, dtype);
    absl::Status status;
    OwnedTensor got = Evaluate(*p, in, &status);
    ASSERT_TRUE(status.ok()) << status;
    auto e = Parse(text, DefaultInputNames(ninputs));
    ASSERT_TRUE(e.ok());
    int bad = 0;
    testing::ForEachIndex(got.view.shape, [&](const std::vector<int64_t>& idx) {
      if (bad > 3) return;
      std::vector<RefValue> v(e->nodes.size());
      // Literals and calls on literals alone are Python's numbers: int64 and double, converted
      // where a tensor's op takes them.
      std::vector<bool> wrapped(e->nodes.size(), false);
      double largest = 0;
      for (size_t k = 0; k < e->nodes.size(); ++k) {
        const Node& n = e->nodes[k];
        if (n.kind == NodeKind::kInput) {
          const TensorView& view = in[static_cast<size_t>(n.input)].view;
          const ref::Value r =
              ref::Read(dtype, testing::ElementAt(view, testing::Project(view, idx)));
          v[k] = {r.f, r.i};
        } else if (n.kind == NodeKind::kLiteral) {
          wrapped[k] = true;
          v[k] = {n.float_value, n.int_value};
        } else {
          bool all_wrapped = true;
          for (int a : n.args) all_wrapped = all_wrapped && wrapped[static_cast<size_t>(a)];
          wrapped[k] = all_wrapped;
          const DType t = all_wrapped ? (fl ? DType::kFloat64 : DType::kInt64) : dtype;
          std::vector<RefValue> args;
          for (int a : n.args) {
            RefValue x = v[static_cast<size_t>(a)];
            if (!all_wrapped && wrapped[static_cast<size_t>(a)]) {
              x = fl ? RefValue{ref::RoundToFloat(storage, x.f), 0}
                     : RefValue{0, ref::Wrap(dtype, x.i)};
            }
            args.push_back(x);
          }
          bool ok = true;
          if (n.op->spec.name == "where") {
            v[k] = args[0].i != 0 ? args[1] : args[2];
          } else if (n.op->spec.name == "gt") {
            v[k] = {0, args[0].i > args[1].i ? 1 : 0};
          } else {
            v[k] = RefCall(n.op->spec.name, t, args, ok);
          }
          ASSERT_TRUE(ok) << n.op->spec.name;
          if (fl && !all_wrapped) v[k].f = ref::RoundToFloat(storage, v[k].f);
        }
        largest = std::max(largest, std::fabs(v[k].f));
      }
      const char* g = testing::ElementAt(got.view, idx);
      if (!fl) {
        const int64_t gi = ref::Read(dtype, g).i;
        if (gi != v.back().i && bad++ < 3) {
          std::string values;
          for (size_t k = 0; k < v.size(); ++k) values += " " + std::to_string(v[k].i);
          ADD_FAILURE() << "at " << ShapeToString(DimVector(idx.begin(), idx.end())) << ": got "
                        << gi << ", reference " << v.back().i << " (nodes:" << values << ")";
        }
        return;
      }
      const double want = ref::RoundToFloat(dtype, v.back().f), gf = ref::Read(dtype, g).f;
      const int out_bits = dtype == DType::kFloat16    ? 10
                           : dtype == DType::kBFloat16 ? 7
                           : dtype == DType::kFloat32  ? 23
                                                       : 52;
      const double eps = std::ldexp(1.0, -out_bits);
      const double out_ulp =
          std::ldexp(1.0, std::ilogb(std::max(std::fabs(want), 1e-30)) - out_bits);
      if (!(std::fabs(gf - want) <= 64 * eps * largest + out_ulp) && bad++ < 3) {
        ADD_FAILURE() << "at " << ShapeToString(DimVector(idx.begin(), idx.end())) << ": got " << gf
                      << ", reference " << want << " (largest value " << largest << ")";
      }
    });
    if (bad > 0) {
      ADD_FAILURE() << Explain(*p, in);
      return;
    }
  }
}

// Fixed expressions against arithmetic written out here: each float16/bfloat16 value is
// computed in float32 and rounded to its dtype, as its op alone does.
TEST(ExprEval, HalfValuesRoundAsTheirOpsDo) {
  std::mt19937_64 rng(testing::TestSeed());
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    std::vector<OwnedTensor> in;
    for (int i = 0; i < 3; ++i) {
      in.push_back(testing::RandomLayout(dtype, {37, 129}, rng, Filler(dtype, rng)));
    }
    auto p = Prepare("sigmoid(a * b + c) * 0.5 - a * b", in);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ(p->plan.out_dtype, dtype);
    absl::Status status;
    OwnedTensor got = Evaluate(*p, in, &status);
    ASSERT_TRUE(status.ok()) << status;
    const int bits = dtype == DType::kFloat16 ? 10 : 7;
    auto r = [&](double v) { return ref::RoundToFloat(dtype, static_cast<float>(v)); };
    testing::ForEachIndex(got.view.shape, [&](const std::vector<int64_t>& idx) {
      auto x = [&](int i) {
        return ref::Read(dtype, testing::ElementAt(in[static_cast<size_t>(i)].view, idx)).f;
      };
      // a * b and + c are exact in float32 before their rounding; sigmoid may differ from
      // this formula by a unit of float32, so by one of the half type after rounding.
      const double ab = r(x(0) * x(1));
      const double sg = r(1 / (1 + std::exp(-r(ab + x(2)))));
      const double want = r(r(sg * 0.5) - ab);
      const double g = ref::Read(dtype, testing::ElementAt(got.view, idx)).f;
      const double tolerance = std::ldexp(1.0, std::ilogb(std::max(std::abs(want), 1e-4)) - bits) +
                               std::ldexp(1.0, -1 - bits);
      ASSERT_LE(std::abs(g - want), tolerance)
          << DTypeName(dtype) << " at " << idx[0] << "," << idx[1];
    });
  }
}

TEST(ExprEval, IntegerExpressionsAreExact) {
  std::mt19937_64 rng(testing::TestSeed());
  std::vector<OwnedTensor> in;
  in.push_back(testing::RandomLayout(DType::kInt32, {3, 1000}, rng, Filler(DType::kInt32, rng)));
  in.push_back(testing::RandomLayout(DType::kInt32, {1000}, rng, Filler(DType::kInt32, rng)));
  auto p = Prepare("where(a > b, (a * 3 + b) // 4, -(a & b)) % 5", in);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::Status status;
  OwnedTensor got = Evaluate(*p, in, &status);
  ASSERT_TRUE(status.ok()) << status;
  auto floordiv = [](int64_t x, int64_t y) {
    return x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
  };
  testing::ForEachIndex(got.view.shape, [&](const std::vector<int64_t>& idx) {
    const int64_t a = ref::Read(DType::kInt32, testing::ElementAt(in[0].view, idx)).i;
    const int64_t b = ref::Read(DType::kInt32, testing::ElementAt(in[1].view, {idx[1]})).i;
    const int64_t w = a > b ? floordiv(a * 3 + b, 4) : -(a & b);
    const int64_t want = w - floordiv(w, 5) * 5;
    ASSERT_EQ(ref::Read(DType::kInt32, testing::ElementAt(got.view, idx)).i, want)
        << "a=" << a << " b=" << b;
  });
}

TEST(ExprEval, IntegerDivisionByZeroIsAnError) {
  OwnedTensor a = Contiguous(DType::kInt32, {5000}), b = Contiguous(DType::kInt32, {5000});
  for (int i = 0; i < 5000; ++i) {
    reinterpret_cast<int32_t*>(a.storage.data())[i] = i;
    reinterpret_cast<int32_t*>(b.storage.data())[i] = i == 4321 ? 0 : 3;
  }
  auto p = Prepare("a // b + 1", {a, b});
  ASSERT_TRUE(p.ok()) << p.status();
  absl::Status status;
  Evaluate(*p, {a, b}, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "integer division by zero in 'floor_divide'");
  // Numbers alone are Python's: refused where the expression is prepared.
  EXPECT_EQ(Error("a * b + (7 // (2 - 2))", {a, b}),
            "expression: at 9: division by zero in 'floor_divide' of two numbers (Python raises "
            "ZeroDivisionError)");
}

// Values of a small tensor, as doubles.
OwnedTensor Values(DType dtype, const std::vector<double>& v, bool zero_dim = false) {
  OwnedTensor t =
      Contiguous(dtype, zero_dim ? DimVector{} : DimVector{static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) {
    ref::Value x;
    x.is_int = !IsFloating(dtype);
    x.i = static_cast<int64_t>(v[i]);
    x.f = v[i];
    ref::Write(dtype, ref::ConvertTo(dtype, x), t.storage.data() + i * ItemSize(dtype));
  }
  return t;
}

std::vector<double> RunExpr(const std::string& text, const std::vector<OwnedTensor>& in,
                            std::optional<DType> out = std::nullopt) {
  OutputOptions output;
  output.dtype = out;
  auto p = Prepare(text, in, output);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status();
  if (!p.ok()) return {};
  absl::Status status;
  OwnedTensor got = Evaluate(*p, in, &status);
  EXPECT_TRUE(status.ok()) << text << ": " << status;
  std::vector<double> v;
  testing::ForEachIndex(got.view.shape, [&](const std::vector<int64_t>& idx) {
    v.push_back(ref::Read(got.view.dtype, testing::ElementAt(got.view, idx)).AsDouble());
  });
  return v;
}

// The cases where expressions once differed from their ops, each against the op's result.
TEST(ExprEval, MeansExactlyItsOps) {
  const double inf = std::numeric_limits<double>::infinity();
  // An output dtype converts the root's value; it does not skip its rounding or its cast.
  EXPECT_EQ(RunExpr("cast(a, int8)", {Values(DType::kFloat32, {300.5, -1.5})}, DType::kInt32),
            (std::vector<double>{127, -1}));
  EXPECT_EQ(RunExpr("cast(a, float16)", {Values(DType::kFloat32, {0.1})}, DType::kFloat32),
            std::vector<double>{0.0999755859375});
  EXPECT_EQ(RunExpr("a * b", {Values(DType::kFloat16, {0.1}), Values(DType::kFloat16, {3})},
                    DType::kFloat32),
            std::vector<double>{0.2998046875});
  // A half op's arguments of other dtypes are rounded to it first.
  EXPECT_EQ(RunExpr("a + b", {Values(DType::kFloat16, {0.5, -65504}),
                              Values(DType::kInt32, {2049, 100000})}),
            (std::vector<double>{2048, inf}));
  EXPECT_EQ(RunExpr("a < b", {Values(DType::kFloat16, {2048}), Values(DType::kInt32, {2049})}),
            std::vector<double>{0});
  EXPECT_EQ(RunExpr("a * b", {Values(DType::kFloat16, {3}), Values(DType::kFloat64, {0.1}, true)}),
            std::vector<double>{0.2998046875});
  EXPECT_EQ(RunExpr("a * 0.1", {Values(DType::kFloat16, {3})}), std::vector<double>{0.2998046875});
  // A half intermediate is rounded where its op would round it.
  EXPECT_EQ(RunExpr("cast(a * b, float32) - 0.2998046875",
                    {Values(DType::kFloat16, {0.1}), Values(DType::kFloat16, {3})}),
            std::vector<double>{0});
  // Signs of zero.
  EXPECT_EQ(RunExpr("1 / -a", {Values(DType::kFloat32, {0})}), std::vector<double>{-inf});
  EXPECT_EQ(RunExpr("atan2(-a, b)", {Values(DType::kFloat32, {0}), Values(DType::kFloat32, {-1})}),
            std::vector<double>{-static_cast<double>(static_cast<float>(M_PI))});
  // Numbers alone: checked as a literal is, casts rounded.
  const OwnedTensor i8 = Values(DType::kInt8, {1});
  EXPECT_EQ(Error("a + (100 + 200)", {i8}),
            "expression: at 5: 300 does not fit int8, the type 'add' computes in here");
  EXPECT_EQ(RunExpr("a * cast(0.1, float16)", {Values(DType::kFloat64, {1})}),
            std::vector<double>{0.0999755859375});
  EXPECT_EQ(RunExpr("a + cast(1e300, float32)", {Values(DType::kFloat64, {1})}),
            std::vector<double>{inf});
  // A number cast is its Python value converted once, as torch.tensor(v, dtype=...) does: not
  // through float32 first.
  EXPECT_EQ(RunExpr("a + cast(1e300, float64)", {Values(DType::kFloat64, {1})}),
            std::vector<double>{1e300});
  EXPECT_EQ(RunExpr("a * cast(0.1, float64)", {Values(DType::kFloat64, {1})}),
            std::vector<double>{0.1});
  EXPECT_EQ(RunExpr("a + cast(16777217.0, int64)", {Values(DType::kInt64, {0})}),
            std::vector<double>{16777217});
  EXPECT_EQ(RunExpr("a + cast(16777217.0, int32)", {Values(DType::kInt32, {0})}),
            std::vector<double>{16777217});
  // A cast of numbers is a zero-dim tensor: int32 with a float16 one is float16.
  EXPECT_EQ(TypeOf("a * cast(2, float16)", {Values(DType::kInt32, {1})}), DType::kFloat16);
  EXPECT_EQ(TypeOf("a * 2.0", {Values(DType::kInt32, {1})}), DType::kFloat32);
}

// Python's syntax and Python's meaning for arithmetic on numbers, or a refusal saying so.
TEST(ExprEval, NumbersAreComputedAsPythonComputesThem) {
  const OwnedTensor f = Values(DType::kFloat32, {3}), i = Values(DType::kInt32, {3});
  EXPECT_EQ(RunExpr("a * (True + True)", {i}), std::vector<double>{6});
  EXPECT_EQ(RunExpr("a * ~True", {i}), std::vector<double>{-6});
  EXPECT_EQ(RunExpr("a * -True", {i}), std::vector<double>{-3});
  EXPECT_EQ(RunExpr("a * 2 ** -1", {f}), std::vector<double>{1.5});
  EXPECT_EQ(TypeOf("a * 2 ** -1", {i}), DType::kFloat32);
  EXPECT_EQ(RunExpr("a * 2 ** 10", {i}), std::vector<double>{3072});
  EXPECT_EQ(RunExpr("a + 0x10 + 0o10 + 0b10 + 1_000", {i}), std::vector<double>{1029});
  EXPECT_EQ(RunExpr("neg(a,)", {i}), std::vector<double>{-3});
  EXPECT_EQ(RunExpr("clamp(a, min=0, max=2,)", {i}), std::vector<double>{2});
  EXPECT_EQ(RunExpr("a * (7 // -2) + 7 % -2", {i}), std::vector<double>{-13});
  EXPECT_EQ(RunExpr("a * (1 / 3)", {Values(DType::kFloat64, {3})}),
            std::vector<double>{3 * (1.0 / 3)});
  EXPECT_EQ(RunExpr("a * (1 < 2)", {i}), std::vector<double>{3});
  EXPECT_EQ(Error("a + 007", {i}),
            "expression: at 4: '007' has a leading zero, which Python does not allow in a decimal "
            "integer (write 0o... for octal)");
  EXPECT_EQ(Error("a + 1_", {i}),
            "expression: at 4: '1_' is not a number: '_' goes between digits");
  EXPECT_EQ(Error("a + 2j", {i}),
            "expression: at 4: '2j' is a complex number; there are none here");
  EXPECT_EQ(Error("a ** -1", {i}),
            "expression: at 5: an integer to a negative integer power (-1) is refused, as PyTorch "
            "refuses it: write a float exponent, or cast the base to a float");
  EXPECT_EQ(Error("a * (1 / 0)", {f}),
            "expression: at 5: division by zero in 'div' of two numbers (Python raises "
            "ZeroDivisionError)");
  EXPECT_EQ(Error("a * (2 ** 63)", {i}),
            "expression: at 5: 'pow' of these numbers does not fit 64 bits");
  // Python's value, whatever int64 arithmetic would wrap to: attributes count.
  EXPECT_EQ(Error("a * square(2 ** 40)", {i}),
            "expression: at 4: 'square' of these numbers does not fit 64 bits");
  EXPECT_EQ(Error("a * addcmul(0, 2 ** 40, 2 ** 40)", {i}),
            "expression: at 4: 'addcmul' of these numbers does not fit 64 bits");
  EXPECT_EQ(Error("a * add(2 ** 62, 2 ** 61, alpha=2)", {i}),
            "expression: at 4: 'add' of these numbers does not fit 64 bits");
  EXPECT_EQ(Error("a * sub(-(2 ** 62), 2 ** 62, alpha=2)", {i}),
            "expression: at 4: 'sub' of these numbers does not fit 64 bits");
  EXPECT_EQ(RunExpr("a * add(2 ** 40, 3, alpha=-2)", {Values(DType::kInt64, {1})}),
            std::vector<double>{1099511627770.0});
  EXPECT_EQ(RunExpr("a + (2 ** 62 - 1) * 2 - (2 ** 62 - 1) * 2", {Values(DType::kInt64, {5})}),
            std::vector<double>{5});
  EXPECT_EQ(Error("a * (0 ** -1)", {f}),
            "expression: at 5: zero to a negative power (Python raises ZeroDivisionError)");
  EXPECT_EQ(Error("a * (0.0 ** -0.5)", {f}),
            "expression: at 5: zero to a negative power (Python raises ZeroDivisionError)");
  EXPECT_EQ(Error("a * (1 << -1)", {i}),
            "expression: at 5: a negative shift count (Python raises ValueError)");
  EXPECT_EQ(Error("a * (2 and 3)", {i}),
            "expression: at 5: 'logical_and' (and, or) over numbers takes True and False only: "
            "Python's would give one of the numbers back");
  EXPECT_EQ(RunExpr("a * (True and not False)", {i}), std::vector<double>{3});
}

TEST(ExprEval, AttributesLiteralsAndExplicitCasts) {
  OwnedTensor a = Contiguous(DType::kFloat32, {6});
  const float values[] = {-2.f, -0.5f, 0.f, 0.3f, 1.f, 7.f};
  std::memcpy(a.storage.data(), values, sizeof(values));
  auto run = [&](const std::string& text) {
    auto p = Prepare(text, {a});
    EXPECT_TRUE(p.ok()) << text << ": " << p.status();
    absl::Status status;
    OwnedTensor out = Evaluate(*p, {a}, &status);
    EXPECT_TRUE(status.ok()) << status;
    std::vector<double> v;
    for (int i = 0; i < 6; ++i)
      v.push_back(
          ref::Read(out.view.dtype, out.storage.data() + i * ItemSize(out.view.dtype)).AsDouble());
    return v;
  };
  EXPECT_EQ(run("clamp(a, min=0, max=1)"),
            (std::vector<double>{0, 0, 0, 0.30000001192092896, 1, 1}));
  EXPECT_EQ(run("cast(a * 2.5, int32)"), (std::vector<double>{-5, -1, 0, 0, 2, 17}));
  EXPECT_EQ(run("a > 0.3"), (std::vector<double>{0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(run("(a > 0) & (a < 5)"), (std::vector<double>{0, 0, 0, 1, 1, 0}));
  // Literal arithmetic is Python's, in float64: 1/3 is not rounded to float32 first.
  EXPECT_EQ(run("cast(a, float64) * (1 / 3)")[5], 7.0 * (1.0 / 3));
  // An explicit cast rounds where it stands: 0.3 as float16 is 0.300048828125.
  EXPECT_EQ(run("cast(a, float16) + cast(a, float64)")[3], 0.300048828125 + 0.30000001192092896);
  EXPECT_EQ(run("a"), (std::vector<double>{-2, -0.5, 0, 0.30000001192092896, 1, 7}));
}

// Calls on literals alone (Python's int64 and float64 arithmetic) where a tensor op takes
// their value: folded once on the CPU, computed per element in a GPU kernel.
TEST(ExprEval, CallsOnLiteralsAlone) {
  for (DType dtype : {DType::kInt16, DType::kInt64, DType::kFloat32})
    for (bool permuted : {false, true}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + (permuted ? " permuted" : ""));
      // Values -12..11 in order; the permuted view walks them in the same logical order.
      OwnedTensor a = Contiguous(dtype, {2, 3, 4});
      if (permuted) a.view.strides = {1, 2, 6};
      for (int i = 0; i < 24; ++i) {
        ref::Value v;
        v.is_int = !IsFloating(dtype);
        v.i = i - 12;
        v.f = i - 12;
        const int at = permuted ? (i / 12) + ((i / 4) % 3) * 2 + (i % 4) * 6 : i;
        ref::Write(dtype, v, a.storage.data() + at * ItemSize(dtype));
      }
      auto run = [&](const std::string& text) {
        auto p = Prepare(text, {a});
        EXPECT_TRUE(p.ok()) << text << ": " << p.status();
        absl::Status status;
        OwnedTensor out = Evaluate(*p, {a}, &status);
        EXPECT_TRUE(status.ok()) << status;
        std::vector<double> v;
        for (int i = 0; i < 24; i += 5) {
          v.push_back(ref::Read(out.view.dtype, out.storage.data() + i * ItemSize(out.view.dtype))
                          .AsDouble());
        }
        return v;
      };
      EXPECT_EQ(run("minimum(a, neg(3))"), (std::vector<double>{-12, -7, -3, -3, -3}))
          << "minimum(a, neg(3))";
      EXPECT_EQ(run("a + neg(3)"), (std::vector<double>{-15, -10, -5, 0, 5}));
      EXPECT_EQ(run("minimum(a + 5, neg(3))"), (std::vector<double>{-7, -3, -3, -3, -3}));
      EXPECT_EQ(run("a * (2 - 5)"), (std::vector<double>{36, 21, 6, -9, -24}));
      EXPECT_EQ(run("neg(a) - neg(neg(2))"), (std::vector<double>{10, 5, 0, -5, -10}));
      if (!IsFloating(dtype)) {
        EXPECT_EQ(run("minimum(bitwise_and(5, a), neg(3))"),
                  (std::vector<double>{-3, -3, -3, -3, -3}));
        EXPECT_EQ(run("minimum(bitwise_and(5, a), minimum(a, neg(3))) * (a - 1)"),
                  (std::vector<double>{156, 56, 9, -6, -21}));
      }
    }
}

TEST(ExprEval, EmptyAndZeroDimTensors) {
  OwnedTensor empty = Contiguous(DType::kFloat32, {0, 3}), scalar = Contiguous(DType::kFloat32, {});
  reinterpret_cast<float*>(scalar.storage.data())[0] = 2;
  auto p = Prepare("a * b + 1", {empty, scalar});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->plan.out_shape, (DimVector{0, 3}));
  absl::Status status;
  Evaluate(*p, {empty, scalar}, &status);
  EXPECT_TRUE(status.ok()) << status;
  p = Prepare("a * a + 1", {scalar});
  ASSERT_TRUE(p.ok()) << p.status();
  OwnedTensor out = Evaluate(*p, {scalar}, &status);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(out.view.shape, DimVector{});
  EXPECT_EQ(reinterpret_cast<const float*>(out.storage.data())[0], 5.f);
}

}  // namespace
}  // namespace tc::expr

namespace tc::expr {
namespace {

// FoldConstants on its own: each expression parsed over one input `a`, folded, and written
// back in canonical form (calls over literals alone become one literal of Python's value,
// casts of literals a zero-dimensional tensor of their dtype, exact).
std::string Folded(const std::string& text) {
  auto parsed = Parse(text, {"a"}, Limits{});
  if (!parsed.ok()) return std::string(parsed.status().message());
  Expression e = *std::move(parsed);
  if (absl::Status s = FoldConstants(&e); !s.ok()) return std::string(s.message());
  return Canonical(e);
}

TEST(FoldConstants, CallsOnNumbersBecomeTheirPythonValue) {
  // Left to right: a + 1 is not a call on numbers; 2 * 3 is.
  EXPECT_EQ(Folded("a + 1 + 2 * 3"), "add(add($0,1),6)");
  EXPECT_EQ(Folded("a + (True + True)"), "add($0,2)");
  EXPECT_EQ(Folded("a * 2 ** -1"), "mul($0,0.5)");
  EXPECT_EQ(Folded("a * (7 // -2)"), "mul($0,-4)");
  EXPECT_EQ(Folded("neg(a) + abs(-3)"), "add(neg($0),3)");
  EXPECT_EQ(Folded("a * (1 < 2)"), "mul($0,True)");
  // Casts of numbers: zero-dimensional tensors of the dtype, from the number's own value
  // (not through float32 first).
  EXPECT_EQ(Folded("a + cast(1e300, float64)"), "add($0,cast(1e+300,dtype=float64))");
  EXPECT_EQ(Folded("a + cast(0.1, float64)"), "add($0,cast(0.1,dtype=float64))");
  EXPECT_EQ(Folded("a + cast(16777217.0, int64)"), "add($0,cast(16777217,dtype=int64))");
  EXPECT_EQ(Folded("a + cast(0.1, float16)"), "add($0,cast(0.0999755859375,dtype=float16))");
  // Nothing to fold.
  EXPECT_EQ(Folded("sqrt(a) * a"), "mul(sqrt($0),$0)");
}

TEST(FoldConstants, WherePythonRaisesTheFoldRefuses) {
  const auto refused = [](const std::string& text, const std::string& words) {
    const std::string got = Folded(text);
    EXPECT_NE(got.find(words), std::string::npos) << text << ": " << got;
  };
  refused("a + 2 ** 62 * 2 - 2 ** 63", "'mul' of these numbers does not fit 64 bits");
  refused("a * square(2 ** 40)", "'square' of these numbers does not fit 64 bits");
  refused("a + add(2 ** 62, 2 ** 62, alpha=2)", "does not fit 64 bits");
  refused("a * (1 / 0)", "division by zero");
  refused("a * (5 % 0)", "by zero");
  refused("a * 0 ** -1", "zero to a negative power (Python raises ZeroDivisionError)");
  refused("a * (0.0 ** -1)", "zero to a negative power");
}
}  // namespace
}  // namespace tc::expr
