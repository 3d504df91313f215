#include "client/tensor_text.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tc::client {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t ToBFloat16(float f) {
  const uint32_t u = FloatBits(f);
  if (std::isnan(f)) return 0x7fc0;
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);  // nearest even
}

uint16_t ToFloat16(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (a < 6.103515625e-05f) {               // subnormal: multiples of 2^-24, nearest even
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  const uint32_t ua = u & 0x7fffffff;
  const uint32_t rounded = ua + 0xfff + ((ua >> 13) & 1);
  return sign | static_cast<uint16_t>((rounded >> 13) - (112u << 10));
}

float FromFloat16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    mag = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    mag = BitsFloat(((exp + 112) << 23) | (mant << 13));
  }
  return BitsFloat(FloatBits(mag) | sign);
}

template <typename T>
void Append(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
absl::Status AppendInt(std::string& out, absl::string_view text) {
  int64_t v;
  if (!absl::SimpleAtoi(text, &v) || v < std::numeric_limits<T>::min() ||
      v > static_cast<int64_t>(std::numeric_limits<T>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a valid ", sizeof(T) * 8, "-bit integer"));
  }
  Append(out, static_cast<T>(v));
  return absl::OkStatus();
}

absl::Status AppendValue(v1::DType t, absl::string_view text, std::string& out) {
  text = absl::StripAsciiWhitespace(text);
  switch (t) {
    case v1::bool_: {
      bool b;
      if (text == "1") {
        b = true;
      } else if (text == "0") {
        b = false;
      } else if (!absl::SimpleAtob(text, &b)) {
        return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a bool"));
      }
      Append<uint8_t>(out, b ? 1 : 0);
      return absl::OkStatus();
    }
    case v1::uint8:
      if (int64_t v; absl::SimpleAtoi(text, &v) && v >= 0 && v <= 255) {
        Append<uint8_t>(out, static_cast<uint8_t>(v));
        return absl::OkStatus();
      }
      return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a valid uint8"));
    case v1::int8:
      return AppendInt<int8_t>(out, text);
    case v1::int16:
      return AppendInt<int16_t>(out, text);
    case v1::int32:
      return AppendInt<int32_t>(out, text);
    case v1::int64:
      return AppendInt<int64_t>(out, text);
    default:
      break;
  }
  double d;
  if (!absl::SimpleAtod(text, &d)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a number"));
  }
  switch (t) {
    case v1::float16:
      Append(out, ToFloat16(static_cast<float>(d)));
      break;
    case v1::bfloat16:
      Append(out, ToBFloat16(static_cast<float>(d)));
      break;
    case v1::float32:
      Append(out, static_cast<float>(d));
      break;
    case v1::float64:
      Append(out, d);
      break;
    default:
      return absl::InvalidArgumentError("unknown dtype");
  }
  return absl::OkStatus();
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string FormatValue(v1::DType t, const char* p) {
  switch (t) {
    case v1::bool_:
      return *p ? "True" : "False";
    case v1::uint8:
      return absl::StrCat(Load<uint8_t>(p));
    case v1::int8:
      return absl::StrCat(Load<int8_t>(p));
    case v1::int16:
      return absl::StrCat(Load<int16_t>(p));
    case v1::int32:
      return absl::StrCat(Load<int32_t>(p));
    case v1::int64:
      return absl::StrCat(Load<int64_t>(p));
    case v1::float16:
      return absl::StrCat(FromFloat16(Load<uint16_t>(p)));
    case v1::bfloat16:
      return absl::StrCat(BitsFloat(static_cast<uint32_t>(Load<uint16_t>(p)) << 16));
    case v1::float32:
      return absl::StrCat(Load<float>(p));
    case v1::float64:
      return absl::StrCat(Load<double>(p));
    default:
      return "?";
  }
}

}  // namespace

int ElementSize(v1::DType t) {
  switch (t) {
    case v1::bool_:
    case v1::uint8:
    case v1::int8:
      return 1;
    case v1::int16:
    case v1::float16:
    case v1::bfloat16:
      return 2;
    case v1::int32:
    case v1::float32:
      return 4;
    case v1::int64:
    case v1::float64:
      return 8;
    default:
      return 0;
  }
}

absl::StatusOr<v1::Tensor> ParseTensor(absl::string_view spec) {
  const size_t open = spec.find('['), close = spec.find(']'), eq = spec.find('=');
  if (open == absl::string_view::npos || close == absl::string_view::npos || eq != close + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", spec, "' is not of the form DTYPE[d0,d1,...]=v0,v1,... (e.g. float32[2]=1,2)"));
  }
  v1::Tensor t;
  v1::DType dtype;
  const std::string name(spec.substr(0, open));
  if (!v1::DType_Parse(name, &dtype) || dtype == v1::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", spec.substr(0, open), "'"));
  }
  t.set_dtype(dtype);
  int64_t numel = 1;
  const absl::string_view dims = spec.substr(open + 1, close - open - 1);
  if (!absl::StripAsciiWhitespace(dims).empty()) {
    for (absl::string_view d : absl::StrSplit(dims, ',')) {
      int64_t v;
      if (!absl::SimpleAtoi(d, &v) || v < 0) {
        return absl::InvalidArgumentError(absl::StrCat("bad dim '", d, "' in '", spec, "'"));
      }
      t.add_shape(v);
      numel *= v;
    }
  }
  const absl::string_view values = spec.substr(eq + 1);
  std::vector<absl::string_view> parts;
  if (!absl::StripAsciiWhitespace(values).empty()) parts = absl::StrSplit(values, ',');
  if (static_cast<int64_t>(parts.size()) != numel) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", spec, "' has ", parts.size(), " values for ", numel, " elements"));
  }
  std::string* data = t.mutable_data();
  for (absl::string_view v : parts) {
    if (auto s = AppendValue(dtype, v, *data); !s.ok()) return s;
  }
  return t;
}

absl::StatusOr<std::pair<std::string, v1::Attribute>> ParseAttribute(absl::string_view spec) {
  const size_t eq = spec.find('=');
  if (eq == absl::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", spec, "' is not NAME=VALUE"));
  }
  std::pair<std::string, v1::Attribute> out;
  out.first = std::string(spec.substr(0, eq));
  const std::string value(spec.substr(eq + 1));
  v1::Attribute& a = out.second;
  int64_t i;
  double d;
  v1::DType t;
  if (value == "true" || value == "false") {
    a.set_bool_value(value == "true");
  } else if (v1::DType_Parse(value, &t) && t != v1::DTYPE_UNSPECIFIED) {
    a.set_dtype_value(t);
  } else if (absl::SimpleAtoi(value, &i)) {
    a.set_int_value(i);
  } else if (absl::SimpleAtod(value, &d)) {
    a.set_float_value(d);
  } else {
    a.set_string_value(value);
  }
  return out;
}

absl::StatusOr<std::string> FormatTensor(const v1::Tensor& t) {
  const int item = ElementSize(t.dtype());
  if (item == 0) return absl::InvalidArgumentError("tensor has no valid dtype");
  const int rank = t.shape_size();
  std::vector<int64_t> strides(rank);
  if (t.strides_size() == rank) {
    for (int i = 0; i < rank; ++i) strides[i] = t.strides(i);
  } else {
    int64_t s = 1;
    for (int i = rank; i-- > 0;) {
      strides[i] = s;
      s *= t.shape(i);
    }
  }
  const std::string name = v1::DType_Name(t.dtype());
  std::string out = name + "[";
  for (int i = 0; i < rank; ++i) absl::StrAppend(&out, i ? "," : "", t.shape(i));
  out += "]\n";
  const int64_t storage = static_cast<int64_t>(t.data().size()) / item;
  // Depth-first over the dims, brackets as NumPy prints them.
  auto emit = [&](auto&& self, int dim, int64_t index) -> absl::Status {
    if (dim == rank) {
      if (index < 0 || index >= storage) return absl::OutOfRangeError("element outside storage");
      out += FormatValue(t.dtype(), t.data().data() + index * item);
      return absl::OkStatus();
    }
    out += "[";
    for (int64_t i = 0; i < t.shape(dim); ++i) {
      if (i) out += ", ";
      if (auto s = self(self, dim + 1, index + i * strides[dim]); !s.ok()) return s;
    }
    out += "]";
    return absl::OkStatus();
  };
  if (auto s = emit(emit, 0, t.offset()); !s.ok()) return s;
  return out;
}

}  // namespace tc::client
