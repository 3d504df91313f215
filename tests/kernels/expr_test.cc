// Expressions on the CPU backend (or, with TC_TEST_BACKEND=cuda, on GPU 0: kernels generated
// and compiled at run time, checked against the GPU's own op kernels): typing (PyTorch's promotion with Python scalars, the
// catalog's checks at the right position), and evaluation against two references: the same
// tree run op by op through the engine (bit for bit, over random trees, dtypes and layouts:
// broadcasts, permutations, negative strides, misaligned offsets, short and long rows), and
// hand-written double arithmetic for fixed expressions (one rounding at the output).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/expr/program.h"
#include "tests/support/cpu_backend.h"
#if TC_WITH_CUDA
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

// The backend every test here runs on, expressions and their op-by-op references alike.
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
      return new runtime::DeviceBackend(d->release());
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
    for (size_t k = 0; k < in.size(); ++k) base[k + 1] = const_cast<char*>(in[k].view.data ? reinterpret_cast<const char*>(in[k].view.data) : nullptr);
    s += rtc::GenerateSource(*p.expression, rtc::ChooseWalk(*p.expression, base.data()));
  }
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
OwnedTensor Evaluate(const PreparedOp& p, const std::vector<OwnedTensor>& in, absl::Status* status) {
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
                    f64_0d = Contiguous(DType::kFloat64, {}), i64_0d = Contiguous(DType::kInt64, {});
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
  EXPECT_EQ(Error("a + 300", {i8}), "expression: at 4: 300 does not fit int8, the type 'add' computes in here");
  EXPECT_EQ(Error("a + (-256)", {u8}), "expression: at 5: -256 does not fit uint8, the type 'add' computes in here");
  EXPECT_EQ(Error("sqrt(a) & 1", {f32}),
            "expression: at 0: 'bitwise_and' does not accept float32 (arguments: float32, int64); "
            "it accepts: bool, uint8, int8, int16, int32, int64");
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

// The random trees' ops, by the dtypes they suit (all arguments of one category).
struct TreeOp {
  const char* name;
  int arity;
};
const std::vector<TreeOp> kFloatOps = {{"add", 2},     {"sub", 2},     {"mul", 2},
                                       {"maximum", 2}, {"minimum", 2}, {"neg", 1},
                                       {"abs", 1},     {"sigmoid", 1}, {"tanh", 1},
                                       {"sin", 1},     {"clamp", 3}};
const std::vector<TreeOp> kIntOps = {{"add", 2},         {"sub", 2},     {"mul", 2},
                                     {"bitwise_and", 2}, {"bitwise_xor", 2}, {"maximum", 2},
                                     {"minimum", 2},     {"neg", 1},     {"abs", 1},
                                     {"clamp", 3}};

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
           RandomTree(rng, inputs, floating, depth - 1, used) + ", " +
           input() + ")";
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

// The reference: the tree run op by op through the engine. Literals become zero-dim tensors
// (float64 or int64), which promote as Python scalars do for the trees above; for half
// inputs everything runs in float32 and the result is rounded once at the end.
OwnedTensor OpByOp(const Expression& e, const std::vector<OwnedTensor>& inputs, DType out) {
  Backend& backend = TestBackend();
  std::vector<OwnedTensor> values(e.nodes.size());
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const Node& n = e.nodes[i];
    if (n.kind == NodeKind::kInput) {
      values[i] = inputs[static_cast<size_t>(n.input)];
      continue;
    }
    if (n.kind == NodeKind::kLiteral) {
      ref::Value v;
      v.is_int = n.literal != LiteralKind::kFloat;
      v.i = n.int_value;
      v.f = n.float_value;
      values[i] = Contiguous(v.is_int ? DType::kInt64 : DType::kFloat64, {});
      ref::Write(values[i].view.dtype, v, values[i].storage.data());
      continue;
    }
    std::vector<TensorView> args;
    for (int a : n.args) args.push_back(values[static_cast<size_t>(a)].view);
    auto p = PrepareOp(n.op->spec.name, args, n.attrs, {}, backend.tile_rule());
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return {};
    values[i] = Contiguous(p->plan.out_dtype, p->plan.out_shape);
    EXPECT_TRUE(backend.Run(*p, args, reinterpret_cast<std::byte*>(values[i].storage.data())).ok());
  }
  const OwnedTensor& root = values.back();
  if (root.view.dtype == out) return root;
  AttrMap cast = {{"dtype", out}};
  auto p = PrepareOp("cast", {root.view}, cast, {}, backend.tile_rule());
  EXPECT_TRUE(p.ok()) << p.status();
  OwnedTensor result = Contiguous(out, root.view.shape);
  EXPECT_TRUE(backend.Run(*p, {root.view}, reinterpret_cast<std::byte*>(result.storage.data())).ok());
  return result;
}

bool SameBits(DType t, const char* x, const char* y) {
  if (IsFloating(t)) {
    const double a = ref::Read(t, x).f, b = ref::Read(t, y).f;
    if (std::isnan(a) && std::isnan(b)) return true;
  }
  return std::memcmp(x, y, static_cast<size_t>(ItemSize(t))) == 0;
}

TEST(ExprEval, RandomTreesMatchTheOpsRunOneByOne) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "TC_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                          DType::kInt32,   DType::kInt8,    DType::kInt64,   DType::kUInt8};
  // Shapes for short rows (blocks of whole rows, gathered), long rows (cut into blocks) and
  // the random small ones.
  // No zero-dim inputs: the reference's literals are zero-dim tensors, which would compete
  // with them as Python scalars do not (ExprTyping covers those).
  const std::vector<DimVector> fixed = {{3, 2000}, {2, 3, 9000}, {2, 40000}, {700, 3}, {5000}, {1}};
  for (int round = 0; round < 120; ++round) {
    const DType dtype = dtypes[rng() % std::size(dtypes)];
    const bool half = ItemSize(dtype) == 2 && IsFloating(dtype);
    const int ninputs = 1 + static_cast<int>(rng() % 4);
    DimVector out_shape = round % 3 == 0 ? fixed[rng() % fixed.size()]
                                         : testing::RandomShape(1 + static_cast<int>(rng() % 4), rng, 3000);
    std::vector<bool> used(static_cast<size_t>(ninputs), false);
    std::string text;
    do {
      std::fill(used.begin(), used.end(), false);
      text = RandomTree(rng, ninputs, IsFloating(dtype), 1 + static_cast<int>(rng() % 4), used);
    } while (std::find(used.begin(), used.end(), false) != used.end());
    SCOPED_TRACE(text + " on " + std::string(DTypeName(dtype)) + " " + ShapeToString(out_shape));
    std::vector<OwnedTensor> in, in_wide;
    for (int i = 0; i < ninputs; ++i) {
      DimVector shape = i == 0 ? out_shape : testing::BroadcastableFrom(out_shape, rng);
      if (shape.empty()) shape = {1};
      in.push_back(testing::RandomLayout(dtype, shape, rng, Filler(dtype, rng)));
      if (half) {  // the same values in float32, for the reference
        OwnedTensor w = Contiguous(DType::kFloat32, shape);
        size_t k = 0;
        testing::ForEachIndex(shape, [&](const std::vector<int64_t>& idx) {
          ref::Write(DType::kFloat32, ref::Read(dtype, testing::ElementAt(in.back().view, idx)),
                     w.storage.data() + 4 * k++);
        });
        in_wide.push_back(w);
      }
    }
    OutputOptions output;
    if (rng() % 3 == 0) output.layout = OutputOptions::Layout::kLikeFirstInput;
    auto p = Prepare(text, in, output);
    ASSERT_TRUE(p.ok()) << p.status();
    absl::Status status;
    OwnedTensor got = Evaluate(*p, in, &status);
    ASSERT_TRUE(status.ok()) << status;
    auto e = Parse(text, DefaultInputNames(ninputs));
    ASSERT_TRUE(e.ok());
    OwnedTensor want = OpByOp(*e, half ? in_wide : in, p->plan.out_dtype);
    ASSERT_EQ(want.view.shape, got.view.shape);
    int bad = 0;
    testing::ForEachIndex(got.view.shape, [&](const std::vector<int64_t>& idx) {
      const char* g = testing::ElementAt(got.view, idx);
      const char* w = testing::ElementAt(want.view, idx);
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
}

// The independent reference: the random trees' ops written out in double and exact integer
// arithmetic, each node's value kept as the evaluator keeps it (wrapped to the integer type;
// rounded to float32, or float64 for float64) and the result rounded once to the output.
// Float values are checked within 64 units of rounding of the largest magnitude any node
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
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                          DType::kInt32,   DType::kInt8,    DType::kInt16,   DType::kUInt8,
                          DType::kInt64};
  for (int round = 0; round < 80; ++round) {
    const DType dtype = dtypes[rng() % std::size(dtypes)];
    const bool fl = IsFloating(dtype);
    const DType storage = dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
    const int ninputs = 1 + static_cast<int>(rng() % 4);
    const DimVector out_shape = round % 4 == 0 ? DimVector{3, 20000}
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
          const ref::Value r = ref::Read(dtype, testing::ElementAt(view, testing::Project(view, idx)));
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
              x = fl ? RefValue{ref::RoundToFloat(storage, x.f), 0} : RefValue{0, ref::Wrap(dtype, x.i)};
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
      const double eps = std::ldexp(1.0, storage == DType::kFloat64 ? -52 : -23);
      const int out_bits = dtype == DType::kFloat16 ? 10 : dtype == DType::kBFloat16 ? 7
                           : dtype == DType::kFloat32 ? 23 : 52;
      const double out_ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(want), 1e-30)) - out_bits);
      if (!(std::fabs(gf - want) <= 64 * eps * largest + out_ulp) && bad++ < 3) {
        ADD_FAILURE() << "at " << ShapeToString(DimVector(idx.begin(), idx.end())) << ": got "
                      << gf << ", reference " << want << " (largest value " << largest << ")";
      }
    });
    if (bad > 0) {
      ADD_FAILURE() << Explain(*p, in);
      return;
    }
  }
}

// Fixed expressions against double arithmetic written out here.
TEST(ExprEval, HalfIntermediatesRoundOnceAtTheOutput) {
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
    testing::ForEachIndex(got.view.shape, [&](const std::vector<int64_t>& idx) {
      auto x = [&](int i) { return ref::Read(dtype, testing::ElementAt(in[static_cast<size_t>(i)].view, idx)).f; };
      const double ab = x(0) * x(1);
      const double want = ref::RoundToFloat(dtype, 0.5 / (1 + std::exp(-(ab + x(2)))) - ab);
      const double g = ref::Read(dtype, testing::ElementAt(got.view, idx)).f;
      // One rounding of a value computed in float32: at most one unit in the last place.
      const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::abs(want), 1e-4)) -
                                               (dtype == DType::kFloat16 ? 10 : 7));
      ASSERT_LE(std::abs(g - want), ulp) << DTypeName(dtype) << " at " << idx[0] << "," << idx[1];
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
  auto floordiv = [](int64_t x, int64_t y) { return x / y - ((x % y != 0) && ((x < 0) != (y < 0))); };
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
  for (const char* text : {"a // b + 1", "a * b + (7 // (2 - 2))"}) {  // the second, folded
    auto p = Prepare(text, {a, b});
    ASSERT_TRUE(p.ok()) << p.status();
    absl::Status status;
    Evaluate(*p, {a, b}, &status);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(status.message(), "integer division by zero in 'floor_divide'") << text;
  }
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
    for (int i = 0; i < 6; ++i) v.push_back(ref::Read(out.view.dtype, out.storage.data() + i * ItemSize(out.view.dtype)).AsDouble());
    return v;
  };
  EXPECT_EQ(run("clamp(a, min=0, max=1)"), (std::vector<double>{0, 0, 0, 0.30000001192092896, 1, 1}));
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
        v.push_back(ref::Read(out.view.dtype, out.storage.data() + i * ItemSize(out.view.dtype)).AsDouble());
      }
      return v;
    };
    EXPECT_EQ(run("minimum(a, neg(3))"), (std::vector<double>{-12, -7, -3, -3, -3})) << "minimum(a, neg(3))";
    EXPECT_EQ(run("a + neg(3)"), (std::vector<double>{-15, -10, -5, 0, 5}));
    EXPECT_EQ(run("minimum(a + 5, neg(3))"), (std::vector<double>{-7, -3, -3, -3, -3}));
    EXPECT_EQ(run("a * (2 - 5)"), (std::vector<double>{36, 21, 6, -9, -24}));
    EXPECT_EQ(run("neg(a) - neg(neg(2))"), (std::vector<double>{10, 5, 0, -5, -10}));
    if (!IsFloating(dtype)) {
      EXPECT_EQ(run("minimum(bitwise_and(5, a), neg(3))"), (std::vector<double>{-3, -3, -3, -3, -3}));
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
