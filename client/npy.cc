#include "client/npy.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/tensor_text.h"

namespace tc::client {

namespace {

namespace v1 = ::tensorcompute::v1;

constexpr char kMagic[] = "\x93NUMPY";

struct Descr {
  const char* npy;
  v1::DType dtype;
};
constexpr Descr kDescrs[] = {
    {"|b1", v1::bool_},   {"|u1", v1::uint8},   {"|i1", v1::int8},
    {"<i2", v1::int16},   {"<i4", v1::int32},   {"<i8", v1::int64},
    {"<f2", v1::float16}, {"<f4", v1::float32}, {"<f8", v1::float64},
};

// The value of 'key' in the header dict, as written by NumPy: 'descr': '<f4', ...
absl::StatusOr<std::string> DictValue(absl::string_view header, absl::string_view key) {
  const std::string needle = absl::StrCat("'", key, "':");
  const size_t at = header.find(needle);
  if (at == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(".npy header has no '", key, "'"));
  }
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(header.substr(at + needle.size()));
  size_t end;
  if (absl::StartsWith(rest, "(")) {
    end = rest.find(')') + 1;
  } else if (absl::StartsWith(rest, "'")) {
    end = rest.find('\'', 1) + 1;
  } else {
    end = rest.find_first_of(",}");
  }
  if (end == 0 || end == absl::string_view::npos) {
    return absl::InvalidArgumentError(".npy header is malformed");
  }
  return std::string(rest.substr(0, end));
}

}  // namespace

absl::StatusOr<v1::Tensor> ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string file = ss.str();
  if (file.size() < 10 || file.compare(0, 6, kMagic, 6) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a .npy file"));
  }
  const int major = static_cast<unsigned char>(file[6]);
  size_t header_len, header_at;
  if (major == 1) {
    header_len = static_cast<unsigned char>(file[8]) | (static_cast<unsigned char>(file[9]) << 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) return absl::InvalidArgumentError(".npy file is truncated");
    uint32_t n;
    std::memcpy(&n, file.data() + 8, 4);
    header_len = n;
    header_at = 12;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(".npy format version ", major, " is unknown"));
  }
  if (header_at + header_len > file.size())
    return absl::InvalidArgumentError(".npy file is truncated");
  const absl::string_view header(file.data() + header_at, header_len);
  auto descr = DictValue(header, "descr");
  auto fortran = DictValue(header, "fortran_order");
  auto shape = DictValue(header, "shape");
  if (!descr.ok()) return descr.status();
  if (!fortran.ok()) return fortran.status();
  if (!shape.ok()) return shape.status();
  v1::Tensor t;
  const std::string d = std::string(absl::StripSuffix(absl::StripPrefix(*descr, "'"), "'"));
  for (const Descr& e : kDescrs) {
    if (d == e.npy ||
        (d.size() == 3 && d[0] == '=' && d.substr(1) == std::string(e.npy).substr(1))) {
      t.set_dtype(e.dtype);
    }
  }
  if (t.dtype() == v1::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": dtype ", d, " is not supported"));
  }
  absl::string_view dims = absl::StripSuffix(absl::StripPrefix(*shape, "("), ")");
  std::vector<int64_t> sizes;
  for (absl::string_view p : absl::StrSplit(dims, ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(p), &v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad shape ", *shape));
    }
    sizes.push_back(v);
  }
  for (int64_t v : sizes) t.add_shape(v);
  if (*fortran == "True") {
    int64_t stride = 1;
    for (size_t k = 0; k < sizes.size(); ++k) {
      t.add_strides(stride);
      stride *= sizes[k];
    }
  }
  t.set_data(file.substr(header_at + header_len));
  return t;
}

absl::Status WriteNpy(const std::string& path, const v1::Tensor& t) {
  const char* descr = nullptr;
  for (const Descr& e : kDescrs) {
    if (e.dtype == t.dtype()) descr = e.npy;
  }
  if (descr == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", v1::DType_Name(t.dtype()), " has no .npy equivalent"));
  }
  const int item = ElementSize(t.dtype());
  const int rank = t.shape_size();
  int64_t n = 1;
  for (int64_t d : t.shape()) n *= d;
  std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
  if (strides.empty()) {
    strides.assign(rank, 0);
    int64_t s = 1;
    for (int k = rank - 1; k >= 0; --k) {
      strides[k] = s;
      s *= t.shape(k);
    }
  }
  std::string data;
  data.resize(static_cast<size_t>(n * item));
  std::vector<int64_t> idx(rank, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t at = t.offset();
    for (int k = 0; k < rank; ++k) at += idx[k] * strides[k];
    if (at < 0 || (at + 1) * item > static_cast<int64_t>(t.data().size())) {
      return absl::InternalError("result strides reach outside its data");
    }
    std::memcpy(&data[i * item], t.data().data() + at * item, item);
    for (int k = rank - 1; k >= 0; --k) {
      if (++idx[k] < t.shape(k)) break;
      idx[k] = 0;
    }
  }
  std::string shape = "(";
  for (int k = 0; k < rank; ++k)
    absl::StrAppend(&shape, t.shape(k), rank == 1 ? "," : (k + 1 < rank ? ", " : ""));
  shape += ")";
  std::string header =
      absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Padded with spaces and a newline to a multiple of 64 bytes, version 1 header.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write(kMagic, 6);
  out.put(1);
  out.put(0);
  out.put(static_cast<char>(len & 0xff));
  out.put(static_cast<char>(len >> 8));
  out << header << data;
  return out ? absl::OkStatus() : absl::DataLossError(absl::StrCat("writing ", path, " failed"));
}

}  // namespace tc::client
