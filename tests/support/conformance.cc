#include "tests/support/conformance.h"

#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/random_tensors.h"
#include "tests/support/reference.h"

namespace tc::testing {
namespace {

using ref::Value;

int64_t IntMin(DType t) {
  if (t == DType::kBool || t == DType::kUInt8) return 0;
  // -2^(bits-1), computed without overflowing for int64.
  return static_cast<int64_t>(~((uint64_t{1} << (ItemSize(t) * 8 - 1)) - 1));
}
int64_t IntMax(DType t) {
  if (t == DType::kBool) return 1;
  if (t == DType::kUInt8) return 255;
  return static_cast<int64_t>((uint64_t{1} << (ItemSize(t) * 8 - 1)) - 1);
}

// A random value of dtype t: mostly small, sometimes extreme or special.
Value RandomValue(DType t, std::mt19937_64& rng, bool nonzero, bool small, bool moderate) {
  Value v;
  v.is_int = !IsFloating(t);
  const int r = static_cast<int>(rng() % 100);
  if (v.is_int) {
    if (small) {
      v.i = static_cast<int64_t>(rng() % 12) - 2;
    } else if (nonzero) {
      // Small, so that no conversion to a narrower compute type turns it into 0.
      v.i = static_cast<int64_t>(rng() % 10) + 1;
      if (rng() % 2 && t != DType::kUInt8 && t != DType::kBool) v.i = -v.i;
    } else if (r < 70 || t == DType::kBool) {
      v.i = static_cast<int64_t>(rng() % 21) - 10;
    } else if (r < 80) {
      v.i = r % 2 ? IntMin(t) : IntMax(t);
    } else {
      v.i = static_cast<int64_t>(rng());
    }
    v.i = std::min(std::max(v.i, IntMin(t)), IntMax(t));
    if (t == DType::kBool) v.i = v.i & 1;
    if (nonzero && v.i == 0) v.i = 1;
    if (nonzero && t != DType::kUInt8 && t != DType::kBool && r % 7 == 0) v.i = -1;  // min / -1
    return v;
  }
  std::uniform_real_distribution<double> uni(-10, 10);
  if (small) {
    v.f = std::round(uni(rng) * 2) / 5;  // exponents in [-4, 4]
  } else if (r < 80) {
    v.f = uni(rng);
    if (r < 10) v.f = std::round(v.f * 2) / 2;  // ties for round, exact integers
  } else {
    static constexpr double kSpecial[] = {0.0,
                                          -0.0,
                                          1e30,
                                          -1e30,
                                          1e-30,
                                          65504,
                                          3e38,
                                          std::numeric_limits<double>::infinity(),
                                          -std::numeric_limits<double>::infinity(),
                                          NAN};
    v.f = kSpecial[rng() % std::size(kSpecial)];
  }
  if (moderate && std::isfinite(v.f) && std::fabs(v.f) > 100) v.f = uni(rng);
  v.f = ref::RoundToFloat(t, v.f);
  if (nonzero && v.f == 0) v.f = 1;
  return v;
}

DType ResultTypeOf(const std::vector<TensorView>& in, int skip) {
  bool have_dim = false, have_zero = false;
  DType dim = DType::kBool, zero = DType::kBool;
  for (size_t i = 0; i < in.size(); ++i) {
    if (static_cast<int>(i) == skip) continue;
    if (in[i].shape.empty()) {
      zero = have_zero ? ref::Promote(zero, in[i].dtype) : in[i].dtype;
      have_zero = true;
    } else {
      dim = have_dim ? ref::Promote(dim, in[i].dtype) : in[i].dtype;
      have_dim = true;
    }
  }
  if (!have_dim) return zero;
  if (!have_zero) return dim;
  auto category = [](DType t) { return t == DType::kBool ? 0 : IsFloating(t) ? 2 : 1; };
  return category(zero) > category(dim) ? ref::Promote(dim, zero) : dim;
}

// The expected element, or nullopt where the reference has no single answer.
Value Expect(const ref::Op& op, DType compute, DType out, const std::vector<Value>& x) {
  std::vector<Value> c(x.size());
  for (size_t k = 0; k < x.size(); ++k) c[k] = ref::ConvertTo(compute, x[k]);
  Value r;
  if (op.kind == ref::Kind::kCast) return ref::ConvertTo(out, x[0]);
  if (op.kind == ref::Kind::kQuantized) {
    const AttrMap& a = op.attrs;
    auto f = [&](const char* n) { return std::get<double>(a.at(n)); };
    auto z = [&](const char* n) { return static_cast<double>(std::get<int64_t>(a.at(n))); };
    const double u = (x[0].i - z("a_zero_point")) * f("a_scale"),
                 w = (x[1].i - z("b_zero_point")) * f("b_scale");
    const double real = op.name == "quantized_add"   ? u + w
                        : op.name == "quantized_sub" ? u - w
                                                     : u * w;
    double q = std::nearbyint(real / f("scale")) + z("zero_point");
    q = std::min<double>(std::max<double>(q, IntMin(out)), IntMax(out));
    r.is_int = true;
    r.i = static_cast<int64_t>(q);
    return r;
  }
  if (op.name == "fill") {
    return ref::ConvertTo(
        out, ref::ConvertTo(compute, Value{false, 0, std::get<double>(op.attrs.at("value"))}));
  }
  if (op.name == "clamp" && op.arity == 1) {
    Value v = c[0];
    if (!(v.is_int == false && std::isnan(v.f))) {
      auto bound = [&](const char* n) {
        return ref::ConvertTo(IsFloating(compute) ? DType::kFloat64 : compute,
                              Value{false, 0, std::get<double>(op.attrs.at(n))});
      };
      if (op.attrs.count("min")) {
        const Value lo = bound("min");
        if (v.AsDouble() < lo.AsDouble())
          v = v.is_int ? Value{true, lo.i, 0} : Value{false, 0, lo.f};
      }
      if (op.attrs.count("max")) {
        const Value hi = bound("max");
        if (v.AsDouble() > hi.AsDouble())
          v = v.is_int ? Value{true, hi.i, 0} : Value{false, 0, hi.f};
      }
    }
    return ref::ConvertTo(out, v);
  }
  if (!IsFloating(compute)) {
    int64_t xi[3];
    for (size_t k = 0; k < c.size(); ++k) xi[k] = c[k].i;
    __int128 v;
    const int width = static_cast<int>(ItemSize(compute)) * 8;
    if (op.name == "left_shift") {
      v = (xi[1] < 0 || xi[1] >= width)
              ? 0
              : static_cast<__int128>(static_cast<unsigned __int128>(xi[0]) << xi[1]);
    } else if (op.name == "right_shift") {
      v = (xi[1] < 0 || xi[1] >= width) ? (xi[0] < 0 ? -1 : 0) : (xi[0] >> xi[1]);
    } else if (op.name == "bitwise_not" && compute == DType::kBool) {
      v = !xi[0];
    } else if (op.name == "add" && compute == DType::kBool) {
      // alpha converts to bool, as PyTorch does for bool tensors: a or (alpha and b).
      v = xi[0] || (std::get<double>(op.attrs.at("alpha")) != 0 && xi[1]);
    } else {
      v = op.i(xi);
    }
    Value w;
    w.is_int = true;
    w.i = op.kind == ref::Kind::kToBool ? v != 0 : ref::Wrap(compute, v);
    return ref::ConvertTo(out, w);
  }
  double xf[3];
  for (size_t k = 0; k < c.size(); ++k) xf[k] = c[k].AsDouble();
  Value w;
  w.f = op.f(xf);
  if (op.kind == ref::Kind::kToBool) {
    w.is_int = true;
    w.i = w.f != 0;
  }
  return ref::ConvertTo(out, w);
}

bool Matches(const ref::Op& op, DType compute, DType out, const Value& want, const Value& got,
             double scale) {
  if (!IsFloating(out)) {
    if (op.kind == ref::Kind::kQuantized) return std::llabs(want.i - got.i) <= 1;
    return want.i == got.i;
  }
  if (std::isnan(want.f)) return std::isnan(got.f);
  if (std::isinf(want.f) || std::isinf(got.f)) return want.f == got.f;
  double rel;
  switch (IsFloating(compute) ? compute : out) {
    case DType::kFloat16:
      rel = 2e-3;
      break;
    case DType::kBFloat16:
      rel = 1.6e-2;
      break;
    case DType::kFloat32:
      rel = 2.5e-7 * op.tolerance;
      break;
    default:
      rel = 1e-14 * op.tolerance;
      break;
  }
  if (out == DType::kFloat16) rel = std::max(rel, 2e-3);
  if (out == DType::kBFloat16) rel = std::max(rel, 1.6e-2);
  if (out == DType::kFloat32) rel = std::max(rel, 2.5e-7);
  double tol = rel * (std::fabs(want.f) + scale) + 1e-37;
  if (out == DType::kFloat16) tol += 6e-8;
  // floor_divide on floats: the quotient may round across an integer; PyTorch's algorithm
  // then lands on the neighbouring integer.
  if (op.name == "floor_divide") tol += 1;
  if (op.name == "remainder" || op.name == "fmod") tol += rel * scale * 4;
  return std::fabs(want.f - got.f) <= tol;
}

std::string Show(const Value& v) {
  std::ostringstream s;
  s.precision(17);
  if (v.is_int) s << v.i;
  else s << v.f;
  return s.str();
}

std::string Describe(const TensorView& v) {
  std::ostringstream s;
  s << DTypeName(v.dtype) << ShapeToString(v.shape) << " strides " << ShapeToString(v.strides)
    << " offset " << v.offset;
  return s.str();
}

}  // namespace

void CheckConformance(Backend& backend, uint64_t seed, const ConformanceOptions& options) {
  std::mt19937_64 rng(seed);
  const std::vector<ref::Op> ops = ref::Ops(rng);
  static const std::vector<DType> kAll = {
      DType::kBool,  DType::kUInt8,   DType::kInt8,     DType::kInt16,   DType::kInt32,
      DType::kInt64, DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64};
  int64_t cases = 0, elements = 0;
  for (const ref::Op& op : ops) {
    int failures = 0;
    const bool enumerate = options.every_dtype_combination && op.arity <= 2;
    const int num_cases = enumerate ? (op.arity == 1 ? 10 : 100) : options.cases_per_op;
    for (int c = 0; c < num_cases && failures == 0; ++c) {
      // Dtypes: mostly one accepted dtype for every input, sometimes a mix.
      std::vector<DType> dtypes(op.arity);
      if (enumerate) {
        dtypes[0] = kAll[c % 10];
        if (op.arity == 2) dtypes[1] = kAll[c / 10];
      } else {
        const DType base = op.dtypes[rng() % op.dtypes.size()];
        for (DType& t : dtypes) t = base;
        if (op.kind != ref::Kind::kQuantized && rng() % 3 == 0) {
          dtypes[rng() % op.arity] = kAll[rng() % kAll.size()];
        }
      }
      if (op.condition_input >= 0) dtypes[op.condition_input] = DType::kBool;
      if (op.kind == ref::Kind::kQuantized && dtypes[0] != dtypes[op.arity - 1]) continue;

      const int rank = static_cast<int>(rng() % (options.max_rank + 1));
      const DimVector out_shape = RandomShape(rank, rng, options.max_numel);
      std::vector<OwnedTensor> inputs(op.arity);
      std::vector<TensorView> views(op.arity);
      for (int k = 0; k < op.arity; ++k) {
        DimVector shape = rng() % 6 == 0 ? DimVector{} : BroadcastableFrom(out_shape, rng);
        const bool nonzero = k == op.nonzero_input, small = k == op.small_input;
        const DType t = dtypes[k];
        inputs[k] = RandomLayout(t, shape, rng, [&](char* p) {
          ref::Write(t, RandomValue(t, rng, nonzero, small, op.moderate), p);
        });
        views[k] = inputs[k].view;
      }
      const DType result = ResultTypeOf(views, op.condition_input);
      if (std::find(op.dtypes.begin(), op.dtypes.end(), result) == op.dtypes.end()) {
        continue;  // a mix this op does not take; refusals are tested elsewhere
      }
      DType compute = result, out = result;
      switch (op.kind) {
        case ref::Kind::kToFloat:
          if (!IsFloating(result)) compute = out = DType::kFloat32;
          break;
        case ref::Kind::kToBool:
          out = DType::kBool;
          break;
        case ref::Kind::kCast:
          out = std::get<DType>(op.attrs.at("dtype"));
          break;
        case ref::Kind::kQuantized:
          break;
        case ref::Kind::kBoolToInt64:
          if (result == DType::kBool) compute = out = DType::kInt64;
          break;
        case ref::Kind::kSame:
          break;
      }

      std::ostringstream where;
      where << "seed " << seed << ", op " << op.name << ", case " << c << ":";
      for (const TensorView& v : views) where << " [" << Describe(v) << "]";
      SCOPED_TRACE(where.str());

      ++cases;
      auto prepared = PrepareOp(op.name, views, op.attrs, {}, backend.tile_rule());
      ASSERT_TRUE(prepared.ok()) << prepared.status();
      const Plan& plan = prepared->plan;
      ASSERT_EQ(plan.out_dtype, out) << DTypeName(plan.out_dtype) << " vs " << DTypeName(out);
      std::vector<char> storage(plan.out_storage_bytes + 1);
      elements += plan.numel;
      const absl::Status run =
          backend.Run(*prepared, views, reinterpret_cast<std::byte*>(storage.data()));
      ASSERT_TRUE(run.ok()) << run;

      TensorView result_view{out,
                             plan.out_shape,
                             plan.out_strides,
                             0,
                             reinterpret_cast<const std::byte*>(storage.data()),
                             plan.out_storage_bytes};
      const double mult = op.attrs.count("alpha")
                              ? std::fabs(std::get<double>(op.attrs.at("alpha")))
                          : op.attrs.count("value") && op.name == "addcmul"
                              ? std::fabs(std::get<double>(op.attrs.at("value")))
                              : 1.0;
      ForEachIndex(plan.out_shape, [&](const std::vector<int64_t>& idx) {
        if (failures >= 5) return;
        std::vector<Value> x(op.arity);
        double scale = 0;
        for (int k = 0; k < op.arity; ++k) {
          x[k] = ref::Read(views[k].dtype, ElementAt(views[k], Project(views[k], idx)));
          if (op.scale_with_inputs && std::isfinite(x[k].AsDouble())) {
            scale += std::fabs(x[k].AsDouble()) * std::max(1.0, mult);
          }
        }
        if (op.name == "addcmul" && op.scale_with_inputs) {
          scale = std::fabs(x[0].AsDouble()) + mult * std::fabs(x[1].AsDouble() * x[2].AsDouble());
        }
        const Value want = Expect(op, compute, out, x);
        const Value got = ref::Read(out, ElementAt(result_view, idx));
        if (!Matches(op, compute, out, want, got, std::isfinite(scale) ? scale : 0)) {
          std::ostringstream in;
          for (const Value& v : x) in << Show(v) << " ";
          ADD_FAILURE() << "at " << ShapeToString(DimVector(idx.begin(), idx.end())) << " inputs "
                        << in.str() << "(" << DTypeName(compute) << " -> " << DTypeName(out)
                        << "): got " << Show(got) << ", want " << Show(want);
          ++failures;
        }
      });
    }
  }
  std::printf("conformance on %s: %zu ops, %lld cases, %lld elements checked\n",
              std::string(backend.name()).c_str(), ops.size(), static_cast<long long>(cases),
              static_cast<long long>(elements));
}

}  // namespace tc::testing
