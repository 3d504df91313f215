// An independent reference for the engine's semantics: dtype encoding and rounding done with
// plain double arithmetic and lookup tables, PyTorch's promotion table written out, and every
// op of the catalog computed per element in double or exact integer arithmetic.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/ops/attributes.h"

namespace tc::ref {

// A scalar as the reference holds it: integers (and bool) exactly, floats as double.
struct Value {
  bool is_int = false;
  int64_t i = 0;
  double f = 0;
  double AsDouble() const { return is_int ? static_cast<double>(i) : f; }
};

double DecodeHalf(uint16_t bits);
double DecodeBFloat16(uint16_t bits);
// Nearest value of `t` to x (ties to even; overflow to infinity for floating types).
double RoundToFloat(DType t, double x);

Value Read(DType t, const char* p);
// Value of dtype `t` stored as bytes (its exact encoding; x must already be representable).
void Write(DType t, const Value& v, char* p);

// Integer v wrapped to the width of integer type t (two's complement).
int64_t Wrap(DType t, __int128 v);
// Conversion of v to dtype t with the engine's documented rules (cast).
Value ConvertTo(DType t, const Value& v);

// PyTorch's promotion table, written out.
DType Promote(DType a, DType b);

enum class Kind { kSame, kToFloat, kToBool, kCast, kQuantized, kBoolToInt64 };

struct Op {
  std::string name;
  int arity;
  Kind kind;
  std::vector<DType> dtypes;  // accepted result types
  // Element results: `x` are the inputs already converted to the compute type.
  std::function<double(const double* x)> f;     // floating compute types
  std::function<__int128(const int64_t* x)> i;  // integer and bool compute types
  AttrMap attrs;
  int condition_input = -1;
  // Inputs must avoid zero (integer divisors), or keep small (pow and shift exponents).
  int nonzero_input = -1;
  int small_input = -1;
  // Relative tolerance multiplier for floating results (transcendental functions: more).
  double tolerance = 1;
  // Absolute tolerance term scales with the inputs' magnitude (cancellation in sums).
  bool scale_with_inputs = false;
  // Inputs stay away from the largest finite values, where float intermediates overflow but
  // the double reference does not.
  bool moderate = false;
};

// Every op of the catalog with randomized attributes drawn from `rng`.
std::vector<Op> Ops(std::mt19937_64& rng);

}  // namespace tc::ref
