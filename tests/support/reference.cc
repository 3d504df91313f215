#include "tests/support/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace tc::ref {
namespace {

using D = DType;
const std::vector<DType> kAll = {D::kBool,  D::kUInt8,   D::kInt8,     D::kInt16,   D::kInt32,
                                 D::kInt64, D::kFloat16, D::kBFloat16, D::kFloat32, D::kFloat64};
const std::vector<DType> kNum = {D::kUInt8,   D::kInt8,     D::kInt16,   D::kInt32,  D::kInt64,
                                 D::kFloat16, D::kBFloat16, D::kFloat32, D::kFloat64};
const std::vector<DType> kInt = {D::kUInt8, D::kInt8, D::kInt16, D::kInt32, D::kInt64};
const std::vector<DType> kIntBool = {D::kBool,  D::kUInt8, D::kInt8,
                                     D::kInt16, D::kInt32, D::kInt64};
const std::vector<DType> kFloat = {D::kFloat16, D::kBFloat16, D::kFloat32, D::kFloat64};

// All finite non-negative values of a 16-bit float format, ascending, with their bits.
struct Table {
  std::vector<double> values;
  std::vector<uint16_t> bits;
};

const Table& HalfTable(bool bf16) {
  static const Table* tables = [] {
    auto* t = new Table[2];
    for (int b = 0; b < 2; ++b) {
      for (uint32_t u = 0; u < 0x8000; ++u) {
        const double v =
            b ? DecodeBFloat16(static_cast<uint16_t>(u)) : DecodeHalf(static_cast<uint16_t>(u));
        if (!std::isfinite(v)) continue;
        t[b].values.push_back(v);
        t[b].bits.push_back(static_cast<uint16_t>(u));
      }
    }
    return t;
  }();
  return tables[bf16 ? 1 : 0];
}

// Nearest table value, ties to the even encoding; beyond the largest finite value by half a
// step or more: infinity.
double RoundTable(const Table& t, double x) {
  if (std::isnan(x)) return x;
  const double a = std::fabs(x);
  const size_t n = t.values.size();
  const double top = t.values[n - 1], step = top - t.values[n - 2];
  double r;
  if (a >= top + step / 2) {
    r = std::numeric_limits<double>::infinity();
  } else if (a >= top) {
    r = top;
  } else {
    const size_t hi = std::lower_bound(t.values.begin(), t.values.end(), a) - t.values.begin();
    if (t.values[hi] == a) {
      r = a;
    } else {
      const double up = t.values[hi], down = t.values[hi - 1];
      if (a - down < up - a) r = down;
      else if (up - a < a - down) r = up;
      else r = (t.bits[hi] & 1) ? down : up;
    }
  }
  return std::copysign(r, x);
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void Store(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

uint16_t EncodeTable(const Table& t, double x) {
  const bool bf16 = &t == &HalfTable(true);
  if (std::isnan(x)) return bf16 ? 0x7fc0 : 0x7e00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | (bf16 ? 0x7f80 : 0x7c00);
  const size_t k = std::lower_bound(t.values.begin(), t.values.end(), a) - t.values.begin();
  if (k == t.values.size() || t.values[k] != a) std::abort();  // not representable: a test bug
  return sign | t.bits[k];
}

// Python's //: floor of the exact quotient; x // inf is 0 or -1 by sign, inf // x is NaN; a zero
// divisor gives the IEEE quotient (as PyTorch does).
double FloorDivide(double a, double b) {
  if (b == 0) return a / b;
  if (!std::isfinite(a) || std::isnan(b)) return NAN;
  if (std::isinf(b)) return a == 0 ? a / b : (std::signbit(a) == std::signbit(b) ? 0.0 : -1.0);
  return std::floor(a / b);
}
// Python's %, through fmod (exact) rather than a - floor(a / b) * b (which loses everything
// once a / b is large).
double Remainder(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  return m;
}

__int128 FloorDivInt(int64_t a, int64_t b) {
  __int128 q = static_cast<__int128>(a) / b;
  if ((static_cast<__int128>(a) % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

__int128 FloorModInt(int64_t a, int64_t b) {
  return static_cast<__int128>(a) - FloorDivInt(a, b) * b;
}

double Choice(std::mt19937_64& rng, std::initializer_list<double> options) {
  return *(options.begin() + rng() % options.size());
}

}  // namespace

double DecodeHalf(uint16_t bits) {
  const int sign = bits >> 15, exp = (bits >> 10) & 0x1f, mant = bits & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(mant, -24);
  else if (exp == 31) v = mant ? std::nan("") : std::numeric_limits<double>::infinity();
  else v = std::ldexp(1024 + mant, exp - 25);
  return sign ? -v : v;
}

double DecodeBFloat16(uint16_t bits) {
  const int sign = bits >> 15, exp = (bits >> 7) & 0xff, mant = bits & 0x7f;
  double v;
  if (exp == 0) v = std::ldexp(mant, -133);
  else if (exp == 255) v = mant ? std::nan("") : std::numeric_limits<double>::infinity();
  else v = std::ldexp(128 + mant, exp - 134);
  return sign ? -v : v;
}

double RoundToFloat(DType t, double x) {
  switch (t) {
    case D::kFloat16:
      return RoundTable(HalfTable(false), x);
    case D::kBFloat16:
      return RoundTable(HalfTable(true), x);
    case D::kFloat32:
      return static_cast<double>(static_cast<float>(x));
    default:
      return x;
  }
}

Value Read(DType t, const char* p) {
  Value v;
  v.is_int = !IsFloating(t);
  switch (t) {
    case D::kBool:
      v.i = Load<uint8_t>(p) != 0;
      break;
    case D::kUInt8:
      v.i = Load<uint8_t>(p);
      break;
    case D::kInt8:
      v.i = Load<int8_t>(p);
      break;
    case D::kInt16:
      v.i = Load<int16_t>(p);
      break;
    case D::kInt32:
      v.i = Load<int32_t>(p);
      break;
    case D::kInt64:
      v.i = Load<int64_t>(p);
      break;
    case D::kFloat16:
      v.f = DecodeHalf(Load<uint16_t>(p));
      break;
    case D::kBFloat16:
      v.f = DecodeBFloat16(Load<uint16_t>(p));
      break;
    case D::kFloat32:
      v.f = Load<float>(p);
      break;
    case D::kFloat64:
      v.f = Load<double>(p);
      break;
  }
  return v;
}

void Write(DType t, const Value& v, char* p) {
  switch (t) {
    case D::kBool:
      Store<uint8_t>(p, v.i != 0);
      break;
    case D::kUInt8:
      Store<uint8_t>(p, static_cast<uint8_t>(v.i));
      break;
    case D::kInt8:
      Store<int8_t>(p, static_cast<int8_t>(v.i));
      break;
    case D::kInt16:
      Store<int16_t>(p, static_cast<int16_t>(v.i));
      break;
    case D::kInt32:
      Store<int32_t>(p, static_cast<int32_t>(v.i));
      break;
    case D::kInt64:
      Store<int64_t>(p, v.i);
      break;
    case D::kFloat16:
      Store<uint16_t>(p, EncodeTable(HalfTable(false), v.f));
      break;
    case D::kBFloat16:
      Store<uint16_t>(p, EncodeTable(HalfTable(true), v.f));
      break;
    case D::kFloat32:
      Store<float>(p, static_cast<float>(v.f));
      break;
    case D::kFloat64:
      Store<double>(p, v.f);
      break;
  }
}

int64_t Wrap(DType t, __int128 v) {
  const int bits = static_cast<int>(ItemSize(t)) * 8;
  const unsigned __int128 mask =
      bits == 64 ? ~static_cast<uint64_t>(0) : ((static_cast<unsigned __int128>(1) << bits) - 1);
  unsigned __int128 u = static_cast<unsigned __int128>(v) & mask;
  if (t == D::kBool) return v != 0;
  if (t == D::kUInt8) return static_cast<int64_t>(u);
  if (u >> (bits - 1)) u |= ~mask;  // sign-extend
  return static_cast<int64_t>(static_cast<uint64_t>(u));
}

Value ConvertTo(DType t, const Value& v) {
  Value r;
  r.is_int = !IsFloating(t);
  if (t == D::kBool) {
    r.i = v.is_int ? v.i != 0 : (v.f != 0 || std::isnan(v.f));
  } else if (IsFloating(t)) {
    // Integers reach float16 and bfloat16 through float32 (PyTorch's conversion, and ours):
    // two roundings, which differ from one where a value lies within a float32 step of a tie.
    const bool via_float = v.is_int && (t == D::kFloat16 || t == D::kBFloat16);
    r.f = RoundToFloat(t, via_float ? static_cast<double>(static_cast<float>(v.i)) : v.AsDouble());
  } else if (v.is_int) {
    r.i = Wrap(t, v.i);
  } else {
    const int bits = static_cast<int>(ItemSize(t)) * 8;
    const double lo = t == D::kUInt8 ? 0 : -std::ldexp(1, bits - 1);
    const double hi = t == D::kUInt8 ? 255 : std::ldexp(1, bits - 1) - 1;
    if (std::isnan(v.f)) r.i = 0;
    else if (v.f <= lo) r.i = static_cast<int64_t>(lo);
    else if (v.f >= hi)
      r.i = t == D::kInt64 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(hi);
    else r.i = static_cast<int64_t>(std::trunc(v.f));
  }
  return r;
}

DType Promote(DType a, DType b) {
  // Rows and columns in the order bool, uint8, int8, int16, int32, int64, float16, bfloat16,
  // float32, float64.
  static const DType kT[10][10] = {
      {D::kBool, D::kUInt8, D::kInt8, D::kInt16, D::kInt32, D::kInt64, D::kFloat16, D::kBFloat16,
       D::kFloat32, D::kFloat64},
      {D::kUInt8, D::kUInt8, D::kInt16, D::kInt16, D::kInt32, D::kInt64, D::kFloat16, D::kBFloat16,
       D::kFloat32, D::kFloat64},
      {D::kInt8, D::kInt16, D::kInt8, D::kInt16, D::kInt32, D::kInt64, D::kFloat16, D::kBFloat16,
       D::kFloat32, D::kFloat64},
      {D::kInt16, D::kInt16, D::kInt16, D::kInt16, D::kInt32, D::kInt64, D::kFloat16, D::kBFloat16,
       D::kFloat32, D::kFloat64},
      {D::kInt32, D::kInt32, D::kInt32, D::kInt32, D::kInt32, D::kInt64, D::kFloat16, D::kBFloat16,
       D::kFloat32, D::kFloat64},
      {D::kInt64, D::kInt64, D::kInt64, D::kInt64, D::kInt64, D::kInt64, D::kFloat16, D::kBFloat16,
       D::kFloat32, D::kFloat64},
      {D::kFloat16, D::kFloat16, D::kFloat16, D::kFloat16, D::kFloat16, D::kFloat16, D::kFloat16,
       D::kFloat32, D::kFloat32, D::kFloat64},
      {D::kBFloat16, D::kBFloat16, D::kBFloat16, D::kBFloat16, D::kBFloat16, D::kBFloat16,
       D::kFloat32, D::kBFloat16, D::kFloat32, D::kFloat64},
      {D::kFloat32, D::kFloat32, D::kFloat32, D::kFloat32, D::kFloat32, D::kFloat32, D::kFloat32,
       D::kFloat32, D::kFloat32, D::kFloat64},
      {D::kFloat64, D::kFloat64, D::kFloat64, D::kFloat64, D::kFloat64, D::kFloat64, D::kFloat64,
       D::kFloat64, D::kFloat64, D::kFloat64},
  };
  return kT[static_cast<int>(a)][static_cast<int>(b)];
}

// The table below lists each op's fields positionally and leaves trailing ones at their
// defaults, which is what -Wmissing-field-initializers flags.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
std::vector<Op> Ops(std::mt19937_64& rng) {
  const double alpha = Choice(rng, {1, 2, -1, 3, 0});
  const double value = Choice(rng, {1, 2, -3});
  const double slope = Choice(rng, {0.01, 0.2, -0.5});
  std::vector<Op> ops;
  auto add = [&](Op op) { ops.push_back(std::move(op)); };
  using I = __int128;
  auto fnone = std::function<double(const double*)>();
  auto inone = std::function<I(const int64_t*)>();

  add({"add",
       2,
       Kind::kSame,
       kAll,
       [=](const double* x) { return x[0] + alpha * x[1]; },
       [=](const int64_t* x) { return I(x[0]) + I(alpha) * x[1]; },
       {{"alpha", alpha}},
       -1,
       -1,
       -1,
       1,
       true,
       true});
  add({"sub",
       2,
       Kind::kSame,
       kNum,
       [=](const double* x) { return x[0] - alpha * x[1]; },
       [=](const int64_t* x) { return I(x[0]) - I(alpha) * x[1]; },
       {{"alpha", alpha}},
       -1,
       -1,
       -1,
       1,
       true,
       true});
  add({"mul", 2, Kind::kSame, kAll, [](const double* x) { return x[0] * x[1]; },
       [](const int64_t* x) { return I(x[0]) * x[1]; }});
  add({"div", 2, Kind::kToFloat, kAll, [](const double* x) { return x[0] / x[1]; }, inone});
  add({"floor_divide",
       2,
       Kind::kSame,
       kNum,
       [](const double* x) { return FloorDivide(x[0], x[1]); },
       [](const int64_t* x) { return FloorDivInt(x[0], x[1]); },
       {},
       -1,
       1});
  add({"remainder",
       2,
       Kind::kSame,
       kNum,
       [](const double* x) { return Remainder(x[0], x[1]); },
       [](const int64_t* x) { return FloorModInt(x[0], x[1]); },
       {},
       -1,
       1,
       -1,
       1,
       true});
  add({"fmod",
       2,
       Kind::kSame,
       kNum,
       [](const double* x) { return std::fmod(x[0], x[1]); },
       [](const int64_t* x) { return I(x[0]) % x[1]; },
       {},
       -1,
       1});
  add({"pow",
       2,
       Kind::kSame,
       kNum,
       [](const double* x) { return std::pow(x[0], x[1]); },
       [](const int64_t* x) -> I {
         const int64_t b = x[0], e = x[1];
         if (e < 0) return b == 1 ? 1 : b == -1 ? ((e % 2) ? -1 : 1) : 0;
         unsigned __int128 r = 1;
         for (int64_t k = 0; k < e; ++k) r = static_cast<uint64_t>(r * static_cast<uint64_t>(b));
         return static_cast<I>(static_cast<int64_t>(static_cast<uint64_t>(r)));
       },
       {},
       -1,
       -1,
       1,
       4});
  add({"maximum", 2, Kind::kSame, kAll,
       [](const double* x) {
         return std::isnan(x[0]) || std::isnan(x[1]) ? NAN : std::max(x[0], x[1]);
       },
       [](const int64_t* x) { return I(std::max(x[0], x[1])); }});
  add({"minimum", 2, Kind::kSame, kAll,
       [](const double* x) {
         return std::isnan(x[0]) || std::isnan(x[1]) ? NAN : std::min(x[0], x[1]);
       },
       [](const int64_t* x) { return I(std::min(x[0], x[1])); }});
  add({"prelu", 2, Kind::kSame, kFloat,
       [](const double* x) { return x[0] > 0 ? x[0] : x[1] * x[0]; }, inone});
  add({"atan2",
       2,
       Kind::kToFloat,
       kAll,
       [](const double* x) { return std::atan2(x[0], x[1]); },
       inone,
       {},
       -1,
       -1,
       -1,
       4});
  add({"bitwise_and", 2, Kind::kSame, kIntBool, fnone,
       [](const int64_t* x) { return I(x[0] & x[1]); }});
  add({"bitwise_or", 2, Kind::kSame, kIntBool, fnone,
       [](const int64_t* x) { return I(x[0] | x[1]); }});
  add({"bitwise_xor", 2, Kind::kSame, kIntBool, fnone,
       [](const int64_t* x) { return I(x[0] ^ x[1]); }});
  // Shift amounts are checked against the compute type's width in Check below (the reference
  // gets the width through the wrap of the result, so out-of-range shifts are handled here).
  add({"left_shift", 2, Kind::kSame, kInt, fnone, inone, {}, -1, -1, 1});
  add({"right_shift", 2, Kind::kSame, kInt, fnone, inone, {}, -1, -1, 1});

  // Integer comparisons through double would round above 2^53: compare exactly instead.
  add({"eq", 2, Kind::kToBool, kAll, [](const double* x) { return double(x[0] == x[1]); },
       [](const int64_t* x) { return I(x[0] == x[1]); }});
  add({"ne", 2, Kind::kToBool, kAll, [](const double* x) { return double(x[0] != x[1]); },
       [](const int64_t* x) { return I(x[0] != x[1]); }});
  add({"lt", 2, Kind::kToBool, kAll, [](const double* x) { return double(x[0] < x[1]); },
       [](const int64_t* x) { return I(x[0] < x[1]); }});
  add({"le", 2, Kind::kToBool, kAll, [](const double* x) { return double(x[0] <= x[1]); },
       [](const int64_t* x) { return I(x[0] <= x[1]); }});
  add({"gt", 2, Kind::kToBool, kAll, [](const double* x) { return double(x[0] > x[1]); },
       [](const int64_t* x) { return I(x[0] > x[1]); }});
  add({"ge", 2, Kind::kToBool, kAll, [](const double* x) { return double(x[0] >= x[1]); },
       [](const int64_t* x) { return I(x[0] >= x[1]); }});
  add({"logical_and", 2, Kind::kToBool, kAll,
       [](const double* x) { return double(x[0] != 0 && x[1] != 0); },
       [](const int64_t* x) { return I(x[0] != 0 && x[1] != 0); }});
  add({"logical_or", 2, Kind::kToBool, kAll,
       [](const double* x) { return double(x[0] != 0 || x[1] != 0); },
       [](const int64_t* x) { return I(x[0] != 0 || x[1] != 0); }});
  add({"logical_xor", 2, Kind::kToBool, kAll,
       [](const double* x) { return double((x[0] != 0) != (x[1] != 0)); },
       [](const int64_t* x) { return I((x[0] != 0) != (x[1] != 0)); }});
  add({"logical_not", 1, Kind::kToBool, kAll, [](const double* x) { return double(x[0] == 0); },
       [](const int64_t* x) { return I(x[0] == 0); }});

  auto unary_f = [&](const char* name, std::function<double(double)> f, double tol = 4) {
    add({name,
         1,
         Kind::kToFloat,
         kAll,
         [=](const double* x) { return f(x[0]); },
         inone,
         {},
         -1,
         -1,
         -1,
         tol});
  };
  add({"neg", 1, Kind::kSame, kNum, [](const double* x) { return -x[0]; },
       [](const int64_t* x) { return -I(x[0]); }});
  add({"abs", 1, Kind::kSame, kAll, [](const double* x) { return std::fabs(x[0]); },
       [](const int64_t* x) { return x[0] < 0 ? -I(x[0]) : I(x[0]); }});
  add({"sign", 1, Kind::kSame, kAll,
       [](const double* x) { return double((x[0] > 0) - (x[0] < 0)); },
       [](const int64_t* x) { return I((x[0] > 0) - (x[0] < 0)); }});
  add({"relu", 1, Kind::kSame, kNum,
       [](const double* x) { return std::isnan(x[0]) ? x[0] : std::max(x[0], 0.0); },
       [](const int64_t* x) { return I(std::max<int64_t>(x[0], 0)); }});
  add({"leaky_relu",
       1,
       Kind::kSame,
       kFloat,
       [=](const double* x) { return x[0] > 0 ? x[0] : slope * x[0]; },
       inone,
       {{"negative_slope", slope}}});
  unary_f("sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); });
  unary_f("tanh", [](double v) { return std::tanh(v); });
  unary_f("exp", [](double v) { return std::exp(v); });
  unary_f("log", [](double v) { return std::log(v); });
  unary_f("log1p", [](double v) { return std::log1p(v); });
  unary_f("expm1", [](double v) { return std::expm1(v); });
  unary_f(
      "sqrt", [](double v) { return std::sqrt(v); }, 1);
  unary_f("rsqrt", [](double v) { return 1 / std::sqrt(v); });
  unary_f(
      "reciprocal", [](double v) { return 1 / v; }, 1);
  add({"square", 1, Kind::kBoolToInt64, kAll, [](const double* x) { return x[0] * x[0]; },
       [](const int64_t* x) { return I(x[0]) * x[0]; }});
  unary_f("sin", [](double v) { return std::sin(v); });
  unary_f("cos", [](double v) { return std::cos(v); });
  unary_f("erf", [](double v) { return std::erf(v); });
  add({"floor", 1, Kind::kSame, kNum, [](const double* x) { return std::floor(x[0]); },
       [](const int64_t* x) { return I(x[0]); }});
  add({"ceil", 1, Kind::kSame, kNum, [](const double* x) { return std::ceil(x[0]); },
       [](const int64_t* x) { return I(x[0]); }});
  add({"round", 1, Kind::kSame, kNum,
       [](const double* x) {
         const double r = std::round(x[0]);  // half away from zero; fix ties to even
         return std::fabs(x[0] - std::trunc(x[0])) == 0.5 ? 2 * std::round(x[0] / 2) : r;
       },
       [](const int64_t* x) { return I(x[0]); }});
  add({"trunc", 1, Kind::kSame, kNum, [](const double* x) { return std::trunc(x[0]); },
       [](const int64_t* x) { return I(x[0]); }});
  const bool tanh_form = rng() % 2;
  add({"gelu",
       1,
       Kind::kSame,
       kFloat,
       [=](const double* x) {
         const double v = x[0];
         if (tanh_form)
           return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
         return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
       },
       inone,
       {{"approximate", std::string(tanh_form ? "tanh" : "none")}},
       -1,
       -1,
       -1,
       4,
       true});
  add({"silu",
       1,
       Kind::kSame,
       kFloat,
       [](const double* x) { return x[0] / (1 + std::exp(-x[0])); },
       inone,
       {},
       -1,
       -1,
       -1,
       4});
  add({"bitwise_not", 1, Kind::kSame, kIntBool, fnone, [](const int64_t* x) { return I(~x[0]); }});
  add({"isnan", 1, Kind::kToBool, kAll, [](const double* x) { return double(std::isnan(x[0])); },
       [](const int64_t*) { return I(0); }});
  add({"isinf", 1, Kind::kToBool, kAll, [](const double* x) { return double(std::isinf(x[0])); },
       [](const int64_t*) { return I(0); }});
  add({"isfinite", 1, Kind::kToBool, kAll,
       [](const double* x) { return double(std::isfinite(x[0])); },
       [](const int64_t*) { return I(1); }});

  // clamp: bounds as the compute type would hold them are applied by Check.
  const int bounds = static_cast<int>(rng() % 3);
  const double lo = Choice(rng, {-2, 0, -100.5}), hi = Choice(rng, {3, 100, -1});
  AttrMap clamp_attrs;
  if (bounds != 1) clamp_attrs["min"] = lo;
  if (bounds != 0) clamp_attrs["max"] = hi;
  add({"clamp", 1, Kind::kSame, kNum, fnone, inone, clamp_attrs});
  // The tensor form: NaN from any input (the first NaN), then max with min and min with max.
  add({"clamp", 3, Kind::kSame, kNum,
       [](const double* x) {
         for (int k = 0; k < 3; ++k)
           if (std::isnan(x[k])) return x[k];
         const double a = x[0] < x[1] ? x[1] : x[0];
         return x[2] < a ? x[2] : a;
       },
       [](const int64_t* x) { return I(std::min(std::max(x[0], x[1]), x[2])); }});
  add({"cast", 1, Kind::kCast, kAll, fnone, inone, {{"dtype", kAll[rng() % kAll.size()]}}});
  add({"fill", 1, Kind::kSame, kAll, fnone, inone, {{"value", Choice(rng, {0, 1, -2.5, 300.75})}}});
  add({"where",
       3,
       Kind::kSame,
       kAll,
       [](const double* x) { return x[0] != 0 ? x[1] : x[2]; },
       [](const int64_t* x) { return I(x[0] != 0 ? x[1] : x[2]); },
       {},
       0});
  add({"addcmul",
       3,
       Kind::kSame,
       kNum,
       [=](const double* x) { return x[0] + value * x[1] * x[2]; },
       // The triple product can pass 2^127: multiplied modulo 2^128, which keeps the low 64
       // bits the result is truncated to.
       [=](const int64_t* x) {
         const auto wrap = static_cast<unsigned __int128>(I(value)) *
                           static_cast<unsigned __int128>(I(x[1]) * x[2]);
         return static_cast<__int128>(static_cast<unsigned __int128>(I(x[0])) + wrap);
       },
       {{"value", value}},
       -1,
       -1,
       -1,
       2,
       true,
       true});
  // PyTorch's two-sided form (exact at both ends; NaN where it meets inf - inf).
  add({"lerp",
       3,
       Kind::kSame,
       kFloat,
       [](const double* x) {
         const double d = x[1] - x[0];
         return std::fabs(x[2]) < 0.5 ? x[0] + x[2] * d : x[1] - d * (1 - x[2]);
       },
       inone,
       {},
       -1,
       -1,
       -1,
       4,
       true,
       true});
  const double sa = Choice(rng, {0.1, 0.5, 0.02}), sb = Choice(rng, {0.1, 0.25, 0.03}),
               so = Choice(rng, {0.2, 0.05, 1.5});
  for (const char* q : {"quantized_add", "quantized_sub", "quantized_mul"}) {
    add({q,
         2,
         Kind::kQuantized,
         {D::kUInt8, D::kInt8},
         fnone,
         inone,
         {{"a_scale", sa},
          {"a_zero_point", int64_t{3}},
          {"b_scale", sb},
          {"b_zero_point", int64_t{2}},
          {"scale", so},
          {"zero_point", int64_t{1}}}});
  }
  return ops;
}
#pragma GCC diagnostic pop

}  // namespace tc::ref
