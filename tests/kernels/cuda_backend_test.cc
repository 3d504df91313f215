// The CUDA backend against the reference and the CPU backend. Skips where no GPU is visible.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/cpu_backend.h"
#include "kernels/cuda/expr_kernels.h"
#include "kernels/cuda/expr_steps.h"
#include "kernels/cuda/launch_env.h"
#include "kernels/rtc/compile.h"
#include "kernels/rtc/disk_cache.h"
#include "kernels/expr/program.h"
#include "runtime/cuda_device.h"
#include "tests/support/device_backend.h"
#include "tests/support/conformance.h"
#include "tests/support/device_checks.h"
#include "tests/support/kernel_cases.h"
#include "tests/support/random_tensors.h"
#include "tests/support/reference.h"

namespace tc {
namespace {

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (runtime::CudaDevice::Count() == 0) {
      GTEST_SKIP() << "no CUDA device visible: skipping GPU tests";
    }
    auto d = runtime::CudaDevice::Create(0, {});
    ASSERT_TRUE(d.ok()) << d.status();
    device_ = *std::move(d);
    backend_ = std::make_unique<runtime::DeviceBackend>(device_.get());
  }
  std::unique_ptr<runtime::CudaDevice> device_;
  std::unique_ptr<runtime::DeviceBackend> backend_;
};

TEST_F(CudaBackendTest, EveryOpMatchesTheReference) {
  const uint64_t seed = testing::TestSeed();
  std::printf("TC_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  testing::CheckConformance(*backend_, seed, {});
}

TEST_F(CudaBackendTest, EveryDtypeCombinationMatchesTheReference) {
  const uint64_t seed = testing::TestSeed() ^ 0x5bd1e995ull;
  testing::ConformanceOptions options;
  options.every_dtype_combination = true;
  options.max_numel = 2048;
  testing::CheckConformance(*backend_, seed, options);
}

TEST_F(CudaBackendTest, LargeTensorsMatchTheReference) {
  const uint64_t seed = testing::TestSeed() ^ 0x9e3779b97f4a7c15ull;
  testing::ConformanceOptions options;
  options.cases_per_op = 2;
  options.max_numel = 300000;
  options.max_rank = 4;
  testing::CheckConformance(*backend_, seed, options);
}

// Bit-for-bit the CPU result on a large contiguous add (no multiply: alpha 1).
TEST_F(CudaBackendTest, LargeContiguousMatchesCpu) {
  const int64_t n = (int64_t{1} << 24) + 3;
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 4099) * 0.25f;
    b[i] = static_cast<float>(i % 977) - 400.0f;
  }
  TensorView va{DType::kFloat32, {n}, {1}, 0, reinterpret_cast<const std::byte*>(a.data()), n * 4};
  TensorView vb{DType::kFloat32, {n}, {1}, 0, reinterpret_cast<const std::byte*>(b.data()), n * 4};
  const TensorView inputs[] = {va, vb};
  auto op = PrepareOp("add", inputs, {});
  ASSERT_TRUE(op.ok());
  EXPECT_EQ(op->plan.ndim, 1);
  std::vector<float> gpu(n), cpu(n);
  ASSERT_TRUE(backend_->Run(*op, inputs, reinterpret_cast<std::byte*>(gpu.data())).ok());
  CpuBackend cpu_backend;
  ASSERT_TRUE(cpu_backend.Run(*op, inputs, reinterpret_cast<std::byte*>(cpu.data())).ok());
  EXPECT_EQ(std::memcmp(gpu.data(), cpu.data(), n * 4), 0);
}

// Quantized ops on every pair of int8 (and uint8) values, bit for bit the CPU's result: the
// device keeps each product rounded on its own (no multiply-add fused across them), so the
// requantized integers agree even on ties.
TEST_F(CudaBackendTest, QuantizedOpsMatchCpuOnEveryPair) {
  CpuBackend cpu_backend;
  for (DType t : {DType::kInt8, DType::kUInt8}) {
    std::vector<uint8_t> a(65536), b(65536);
    for (int i = 0; i < 65536; ++i) {
      a[i] = static_cast<uint8_t>(i & 255);
      b[i] = static_cast<uint8_t>(i >> 8);
    }
    const TensorView inputs[] = {
        {t, {65536}, {1}, 0, reinterpret_cast<const std::byte*>(a.data()), 65536},
        {t, {65536}, {1}, 0, reinterpret_cast<const std::byte*>(b.data()), 65536}};
    const int64_t zero = t == DType::kUInt8 ? 2 : -2;
    const AttrMap attrs = {{"a_scale", 0.05}, {"a_zero_point", int64_t{3}},
                           {"b_scale", 0.1},  {"b_zero_point", zero},
                           {"scale", 0.2},    {"zero_point", int64_t{1}}};
    for (const char* name : {"quantized_add", "quantized_sub", "quantized_mul"}) {
      auto op = PrepareOp(name, inputs, attrs);
      ASSERT_TRUE(op.ok()) << op.status();
      std::vector<uint8_t> gpu(65536), cpu(65536);
      ASSERT_TRUE(backend_->Run(*op, inputs, reinterpret_cast<std::byte*>(gpu.data())).ok());
      ASSERT_TRUE(cpu_backend.Run(*op, inputs, reinterpret_cast<std::byte*>(cpu.data())).ok());
      int differ = 0;
      for (int i = 0; i < 65536; ++i) differ += gpu[i] != cpu[i];
      EXPECT_EQ(differ, 0) << name << " " << DTypeName(t);
    }
  }
}

// 1-byte add, sub and mul on every pair of values, and against a repeated scalar, bit for bit
// the CPU's result: the device computes them four bytes to a word (Wordwise).
TEST_F(CudaBackendTest, BytewiseOpsMatchCpuOnEveryPair) {
  CpuBackend cpu_backend;
  for (DType t : {DType::kInt8, DType::kUInt8, DType::kBool}) {
    const bool is_bool = t == DType::kBool;
    const int n = 65536;
    std::vector<uint8_t> a(n), b(n);
    for (int i = 0; i < n; ++i) {
      a[i] = static_cast<uint8_t>(is_bool ? (i & 1) : (i & 255));
      b[i] = static_cast<uint8_t>(is_bool ? ((i >> 1) & 1) : (i >> 8));
    }
    const uint8_t k = is_bool ? 1 : 0x9b;
    const TensorView x{t, {n}, {1}, 0, reinterpret_cast<const std::byte*>(a.data()), n};
    const TensorView y{t, {n}, {1}, 0, reinterpret_cast<const std::byte*>(b.data()), n};
    const TensorView scalar{t, {}, {}, 0, reinterpret_cast<const std::byte*>(&k), 1};
    for (const char* name : {"add", "sub", "mul"}) {
      if (is_bool && std::string(name) == "sub") continue;
      for (const auto& [first, second] :
           {std::pair{x, y}, std::pair{x, scalar}, std::pair{scalar, y}}) {
        const TensorView inputs[] = {first, second};
        auto op = PrepareOp(name, inputs, {});
        ASSERT_TRUE(op.ok()) << op.status();
        std::vector<uint8_t> gpu(n), cpu(n);
        ASSERT_TRUE(backend_->Run(*op, inputs, reinterpret_cast<std::byte*>(gpu.data())).ok());
        ASSERT_TRUE(cpu_backend.Run(*op, inputs, reinterpret_cast<std::byte*>(cpu.data())).ok());
        EXPECT_EQ(gpu, cpu) << name << " " << DTypeName(t) << " " << first.shape.size() << " "
                            << second.shape.size();
      }
    }
  }
}

// floor_divide, remainder and fmod of a by b (contiguous, broadcast against each other) on
// the device, bit for bit the CPU's result; a NaN matches any NaN. Floating types also true
// division.
void ExpectDivisionMatchesCpu(runtime::DeviceBackend& gpu_backend, CpuBackend& cpu_backend, DType t,
                              const std::vector<std::byte>& a, const DimVector& a_shape,
                              const std::vector<std::byte>& b, const DimVector& b_shape) {
  const int64_t item = ItemSize(t);
  const auto contiguous = [](const DimVector& shape) {
    DimVector strides(shape.size());
    int64_t step = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      strides[d] = step;
      step *= shape[d];
    }
    return strides;
  };
  const auto is_nan = [t](const std::byte* p) {
    if (t == DType::kFloat32) {
      float f;
      std::memcpy(&f, p, 4);
      return std::isnan(f);
    }
    if (t == DType::kFloat64) {
      double f;
      std::memcpy(&f, p, 8);
      return std::isnan(f);
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    if (t == DType::kFloat16) return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0;
    if (t == DType::kBFloat16) return (h & 0x7f80) == 0x7f80 && (h & 0x007f) != 0;
    return false;
  };
  const TensorView inputs[] = {
      {t, a_shape, contiguous(a_shape), 0, a.data(), static_cast<int64_t>(a.size())},
      {t, b_shape, contiguous(b_shape), 0, b.data(), static_cast<int64_t>(b.size())}};
  for (const char* name : {"floor_divide", "remainder", "fmod", "div"}) {
    if (!IsFloating(t) && std::string_view(name) == "div") continue;  // a float result
    auto op = PrepareOp(name, inputs, {});
    ASSERT_TRUE(op.ok()) << op.status();
    const size_t bytes = static_cast<size_t>(op->plan.out_storage_bytes);
    std::vector<std::byte> gpu(bytes), cpu(bytes);
    ASSERT_TRUE(gpu_backend.Run(*op, inputs, gpu.data()).ok()) << name;
    ASSERT_TRUE(cpu_backend.Run(*op, inputs, cpu.data()).ok()) << name;
    int64_t differ = 0;
    for (size_t i = 0; i < bytes; i += static_cast<size_t>(item)) {
      if (std::memcmp(&gpu[i], &cpu[i], static_cast<size_t>(item)) == 0) continue;
      if (is_nan(&gpu[i]) && is_nan(&cpu[i])) continue;
      if (differ++ < 3) {
        ADD_FAILURE() << name << " " << DTypeName(t) << " differs at element "
                      << i / static_cast<size_t>(item);
      }
    }
    EXPECT_EQ(differ, 0) << name << " " << DTypeName(t);
  }
}

// Integer division (floor_divide, remainder, fmod), bit for bit the CPU's integer division:
// every pair of 1-byte values, every int16 dividend by divisors at the edges and at random
// (the device divides 1- and 2-byte types through float32), and int64 pairs inside and
// outside the 32-bit range (the device takes the 32-bit division for the first).
TEST_F(CudaBackendTest, IntegerDivisionMatchesCpu) {
  CpuBackend cpu_backend;
  std::mt19937_64 rng(testing::TestSeed() ^ 0xd1d1ull);
  const auto check = [&](DType t, const std::vector<std::byte>& a, DimVector a_shape,
                         const std::vector<std::byte>& b, DimVector b_shape) {
    ExpectDivisionMatchesCpu(*backend_, cpu_backend, t, a, a_shape, b, b_shape);
  };
  const auto bytes_of = [](const auto& values) {
    std::vector<std::byte> out(values.size() * sizeof(values[0]));
    std::memcpy(out.data(), values.data(), out.size());
    return out;
  };
  // Every pair of 1-byte values, the divisor never zero.
  for (DType t : {DType::kUInt8, DType::kInt8}) {
    std::vector<uint8_t> a, b;
    for (int i = 0; i < 256; ++i) {
      for (int j = 0; j < 256; ++j) {
        if (static_cast<uint8_t>(j) == 0) continue;
        a.push_back(static_cast<uint8_t>(i));
        b.push_back(static_cast<uint8_t>(j));
      }
    }
    const int64_t n = static_cast<int64_t>(a.size());
    check(t, bytes_of(a), {n}, bytes_of(b), {n});
  }
  // Every int16 dividend [65536, 1] by 64 divisors [1, 64].
  {
    std::vector<int16_t> a(65536),
        b = {1,   -1,  2,   -2,   3,    -3,    7,     -7,     10,    -10,    127,    -128,
             128, 255, 256, -256, 1000, -1001, 16384, -16384, 32767, -32767, -32768, 32766};
    for (int i = 0; i < 65536; ++i) a[i] = static_cast<int16_t>(i - 32768);
    while (b.size() < 64) {
      const auto v = static_cast<int16_t>(rng());
      if (v != 0) b.push_back(v);
    }
    check(DType::kInt16, bytes_of(a), {65536, 1}, bytes_of(b), {1, 64});
  }
  // int64: small values, values just outside 32 bits, the extremes, and random 64-bit ones.
  {
    const std::vector<int64_t> edges = {0,
                                        1,
                                        -1,
                                        2,
                                        -2,
                                        7,
                                        -7,
                                        2147483647,
                                        -2147483647,
                                        -2147483647 - 1,
                                        2147483648,
                                        -2147483649,
                                        std::numeric_limits<int64_t>::max(),
                                        std::numeric_limits<int64_t>::min()};
    std::vector<int64_t> a, b;
    const auto random_value = [&]() -> int64_t {
      switch (rng() % 4) {
        case 0:
          return static_cast<int64_t>(rng() % 201) - 100;
        case 1:
          return static_cast<int32_t>(rng());
        case 2:
          return edges[rng() % edges.size()];
        default:
          return static_cast<int64_t>(rng());
      }
    };
    for (int64_t x : edges) {
      for (int64_t y : edges) {
        if (y == 0) continue;
        a.push_back(x);
        b.push_back(y);
      }
    }
    while (a.size() < 100000) {
      const int64_t y = random_value();
      if (y == 0) continue;
      a.push_back(random_value());
      b.push_back(y);
    }
    const int64_t n = static_cast<int64_t>(a.size());
    check(DType::kInt64, bytes_of(a), {n}, bytes_of(b), {n});
  }
  EXPECT_EQ(device_->memory_in_use(), 0);
}

// Floating division (floor_divide, remainder, fmod), bit for bit the CPU's (whose fmod is
// libm's; the device's takes a shortcut for quotients below 2^20): every float16 and bfloat16
// dividend by divisors at the edges (zeros, infinities, NaN, subnormals, the largest) and at
// random; float32 pairs at random bits, close in size, with quotients about 2^20 and 2^23, among
// subnormals.
TEST_F(CudaBackendTest, FloatDivisionMatchesCpu) {
  CpuBackend cpu_backend;
  std::mt19937_64 rng(testing::TestSeed() ^ 0xf10a7ull);
  const auto bytes_of = [](const auto& values) {
    std::vector<std::byte> out(values.size() * sizeof(values[0]));
    std::memcpy(out.data(), values.data(), out.size());
    return out;
  };
  for (DType t : {DType::kFloat16, DType::kBFloat16}) {
    const bool half = t == DType::kFloat16;
    std::vector<uint16_t> a(65536);
    for (int i = 0; i < 65536; ++i) a[i] = static_cast<uint16_t>(i);
    std::vector<uint16_t> b = {0x0000,
                               0x8000,
                               0x0001,
                               0x8001,
                               half ? uint16_t{0x03ff} : uint16_t{0x007f},
                               half ? uint16_t{0x7c00} : uint16_t{0x7f80},
                               half ? uint16_t{0xfc00} : uint16_t{0xff80},
                               half ? uint16_t{0x7e00} : uint16_t{0x7fc0},
                               half ? uint16_t{0x7bff} : uint16_t{0x7f7f},
                               half ? uint16_t{0x3c00} : uint16_t{0x3f80},
                               half ? uint16_t{0xc200} : uint16_t{0xc040},
                               half ? uint16_t{0x2e66} : uint16_t{0x3dcd}};
    while (b.size() < 48) b.push_back(static_cast<uint16_t>(rng()));
    const int64_t nb = static_cast<int64_t>(b.size());
    ExpectDivisionMatchesCpu(*backend_, cpu_backend, t, bytes_of(a), {65536, 1}, bytes_of(b),
                             {1, nb});
  }
  {
    std::vector<float> a, b;
    const auto bits = [&] {
      const auto u = static_cast<uint32_t>(rng());
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    };
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    while (a.size() < (1u << 20)) {
      float x = 0, y = 0;
      switch (rng() % 5) {
        case 0:  // Any bits: NaNs, infinities, zeros and subnormals among them.
          x = bits();
          y = bits();
          break;
        case 1:  // Close in size.
          y = bits();
          x = y * unit(rng) * 64.0f;
          break;
        case 2:  // Quotients about 2^20 and 2^23, each side of them.
          y = unit(rng) * 1000.0f;
          x = y * ((rng() & 1) ? 0x1p20f : 0x1p23f) +
              y * static_cast<float>(static_cast<int>(rng() % 9) - 4) * 2.0f;
          x = std::nextafter(x, (rng() & 1) ? 0.0f : x * 2.0f);
          break;
        case 3:  // Subnormal divisors.
          y = unit(rng) * 0x1p-130f;
          x = unit(rng) * 0x1p-110f;
          break;
        default:  // Quotients just below and above integers.
          y = unit(rng) * 10.0f;
          x = std::nextafter(y * static_cast<float>(rng() % 100000), (rng() & 1) ? 0.0f : 1e30f);
          break;
      }
      a.push_back(x);
      b.push_back(y);
    }
    const int64_t n = static_cast<int64_t>(a.size());
    ExpectDivisionMatchesCpu(*backend_, cpu_backend, DType::kFloat32, bytes_of(a), {n}, bytes_of(b),
                             {n});
  }
  EXPECT_EQ(device_->memory_in_use(), 0);
}

// atan2, pow, sin, cos, sigmoid, silu and gelu (both forms) of float16 and bfloat16, which
// the GPU computes with
// math of its own for 16-bit results (kernels/ops/math.h, NarrowMath): the unary ops of every
// value of the dtype, atan2 and pow of every value against partners at the edges (zeros,
// infinities, NaN, subnormals, the largest, integers odd and even, 1 and its neighbours) and
// at random, in both argument orders; each within one unit in the last place of the exact
// result rounded to the dtype (double math), NaN exactly where that is NaN, zeros with their
// sign. The unary ops also over views one and three elements in (shifted loads).
TEST_F(CudaBackendTest, HalfNarrowMathWithinAnUlp) {
  std::mt19937_64 rng(testing::TestSeed() ^ 0xa7a2ull);
  for (DType t : {DType::kFloat16, DType::kBFloat16}) {
    const bool half = t == DType::kFloat16;
    const auto decode = [half](uint16_t h) {
      return half ? ref::DecodeHalf(h) : ref::DecodeBFloat16(h);
    };
    const auto encode = [t](double x) {
      ref::Value v;
      v.f = ref::RoundToFloat(t, x);
      uint16_t h;
      ref::Write(t, v, reinterpret_cast<char*>(&h));
      return h;
    };
    const auto is_nan = [half](uint16_t h) {
      return half ? (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0
                  : (h & 0x7f80) == 0x7f80 && (h & 0x007f) != 0;
    };
    // Position in the dtype's order of values (both zeros at 0).
    const auto ordered = [](uint16_t h) { return (h & 0x8000) ? -(h & 0x7fff) : (h & 0x7fff); };
    const auto exact = [](const std::string& name, double x, double y) {
      if (name == "pow") return std::pow(x, y);
      if (name == "atan2") return std::atan2(x, y);
      if (name == "sigmoid") return 1 / (1 + std::exp(-x));
      if (name == "silu") return x / (1 + std::exp(-x));
      if (name == "gelu") {  // x Phi(x) by the tail, which keeps its relative accuracy
        const double q = 0.5 * std::erfc(std::fabs(x) / std::sqrt(2.0));
        return x * (x < 0 ? q : 1 - q);
      }
      if (name == "gelu_tanh") {  // 0.5 x (1 + tanh(u)) as x sigmoid(2u), for the same reason
        return x / (1 + std::exp(-2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      }
      return name == "sin" ? std::sin(x) : std::cos(x);
    };
    // Runs op `name` on inputs (one, or two broadcast against each other, or two of one 1-dim
    // shape paired element by element) and checks every element; the input views may start
    // `offset` and `b_offset` elements into `a` and `b` (views off the 16-byte packs).
    const auto check = [&](const std::string& name, const std::vector<uint16_t>& a,
                           DimVector a_shape, const std::vector<uint16_t>* b, DimVector b_shape,
                           int64_t offset = 0, int64_t b_offset = 0) {
      std::vector<TensorView> inputs;
      const auto view = [t](const std::vector<uint16_t>& v, DimVector shape, int64_t at) {
        DimVector strides(shape.size(), 1);
        if (shape.size() == 2) strides[0] = shape[1];
        return TensorView{t,
                          std::move(shape),
                          std::move(strides),
                          at,
                          reinterpret_cast<const std::byte*>(v.data()),
                          static_cast<int64_t>(v.size() * 2)};
      };
      const bool paired = b != nullptr && b_shape.size() == 1;
      inputs.push_back(view(a, a_shape, offset));
      if (b != nullptr) inputs.push_back(view(*b, b_shape, b_offset));
      AttrMap attrs;
      if (name == "gelu_tanh") attrs["approximate"] = std::string("tanh");
      auto op = PrepareOp(name == "gelu_tanh" ? "gelu" : name, inputs, attrs);
      ASSERT_TRUE(op.ok()) << op.status();
      const int64_t nb = b == nullptr || paired ? 1 : static_cast<int64_t>(b_shape.back());
      const int64_t na = b == nullptr ? static_cast<int64_t>(a.size()) - offset : a_shape[0];
      std::vector<uint16_t> got(static_cast<size_t>(na * nb));
      ASSERT_TRUE(backend_->Run(*op, inputs, reinterpret_cast<std::byte*>(got.data())).ok());
      int64_t inexact = 0, failures = 0;
      for (int64_t i = 0; i < na; ++i) {
        for (int64_t j = 0; j < nb; ++j) {
          const double x = decode(a[static_cast<size_t>(i + offset)]);
          const double y =
              b == nullptr ? 0 : decode((*b)[static_cast<size_t>((paired ? i : j) + b_offset)]);
          const double e = exact(name, x, y);
          const uint16_t want = encode(e), g = got[static_cast<size_t>(i * nb + j)];
          if (g == want || (is_nan(g) && is_nan(want))) continue;
          ++inexact;
          const bool ok = is_nan(want) ? is_nan(g)
                          : is_nan(g)  ? false
                          : (want & 0x7fff) == 0 && (g & 0x7fff) == 0
                              ? false  // a zero of the wrong sign
                              : std::abs(ordered(g) - ordered(want)) <= 1;
          if (!ok && failures++ < 5) {
            ADD_FAILURE() << name << "(" << x << (b == nullptr ? "" : ", " + std::to_string(y))
                          << ") " << DTypeName(t) << ": got bits 0x" << std::hex << g << ", want 0x"
                          << want << std::dec << " (" << e << ")";
          }
        }
      }
      EXPECT_EQ(failures, 0) << name << " " << DTypeName(t);
      std::printf("%s %s: %lld of %lld one unit from the exact result rounded\n", name.c_str(),
                  std::string(DTypeName(t)).c_str(), static_cast<long long>(inexact),
                  static_cast<long long>(na * nb));
    };
    std::vector<uint16_t> every(65536);
    for (int i = 0; i < 65536; ++i) every[i] = static_cast<uint16_t>(i);
    for (const char* name : {"sin", "cos", "sigmoid", "silu", "gelu", "gelu_tanh"}) {
      check(name, every, {65536}, nullptr, {});
      // Views one and three elements in: the row kernel's shifted loads.
      check(name, every, {65535}, nullptr, {}, 1);
      check(name, every, {65533}, nullptr, {}, 3);
    }
    const double inf = std::numeric_limits<double>::infinity();
    const double ulp1 = half ? 0x1p-10 : 0x1p-7;
    std::vector<uint16_t> partners;
    for (double x : {0.0,
                     1.0,
                     2.0,
                     3.0,
                     0.5,
                     0.25,
                     1.5,
                     2.5,
                     7.0,
                     10.0,
                     11.0,
                     1.0 + ulp1,
                     1.0 - ulp1 / 2,
                     3.14159265358979,
                     15.5,
                     1e-3,
                     100.0,
                     1000.0,
                     60000.0,
                     inf}) {
      partners.push_back(encode(x));
      partners.push_back(encode(-x));
    }
    partners.push_back(half ? 0x7e00 : 0x7fc0);  // NaN
    partners.push_back(0x0001);                  // the smallest subnormal
    partners.push_back(half ? 0x7bff : 0x7f7f);  // the largest finite
    std::uniform_real_distribution<double> moderate(-8.0, 8.0);
    while (partners.size() < 72) partners.push_back(encode(moderate(rng)));
    while (partners.size() < 80) partners.push_back(static_cast<uint16_t>(rng()));
    const int64_t np = static_cast<int64_t>(partners.size());
    // Every value beside every value of another order, element by element, over views one
    // and three elements in (the shifted loads of either input).
    std::vector<uint16_t> shuffled = every;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    for (const char* name : {"atan2", "pow"}) {
      check(name, every, {65536, 1}, &partners, {1, np});
      check(name, partners, {np, 1}, &every, {1, 65536});
      check(name, every, {65535}, &shuffled, {65535}, 1, 0);
      check(name, shuffled, {65533}, &every, {65533}, 0, 3);
    }
  }
  EXPECT_EQ(device_->memory_in_use(), 0);
}

// n random elements of t from the generator state x; floating values keep their exponent away
// from NaN and infinity (the top bit below the sign cleared).
std::vector<std::byte> RandomBytes(DType t, int64_t n, uint64_t& x) {
  std::vector<std::byte> v(static_cast<size_t>(n * ItemSize(t)));
  for (std::byte& b : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<std::byte>(x >> 56);
  }
  if (t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32 ||
      t == DType::kFloat64) {
    const int64_t item = ItemSize(t);
    for (size_t i = static_cast<size_t>(item) - 1; i < v.size(); i += static_cast<size_t>(item)) {
      v[i] &= std::byte{0xbf};
    }
  }
  return v;
}

// Layouts that take the shared-memory tile kernel (an input dense along the dim the output is
// not: transposed inputs, a transposed output, channels-first read into channels-last, rank 3,
// 5 and 7 permutations, tile dims fused from two plan dims) with odd sizes, partial tiles,
// batch dims, a misaligned offset and reversed operands, in 1-, 2-, 4- and 8-byte types:
// planned for the tile kernel, bit for bit the CPU's result.
TEST_F(CudaBackendTest, PermutedLayoutsMatchCpu) {
  constexpr int64_t R = 67, C = 131, B = 3, H = 45, W = 70;
  uint64_t x = testing::TestSeed() ^ 0x7157ull;
  const auto random_bytes = [&x](DType t, int64_t n) { return RandomBytes(t, n, x); };
  CpuBackend cpu_backend;
  for (const DType t :
       {DType::kUInt8, DType::kFloat16, DType::kInt32, DType::kFloat32, DType::kFloat64}) {
    const int64_t item = ItemSize(t);
    constexpr int64_t kStorage = 8 * 129 * 3 * 16 + 1;  // the largest view below, and one
    const std::vector<std::byte> a = random_bytes(t, kStorage), b = random_bytes(t, kStorage);
    const auto view = [&](const std::vector<std::byte>& s, DimVector shape, DimVector strides,
                          int64_t offset) {
      return TensorView{t,      std::move(shape), std::move(strides),
                        offset, s.data(),         static_cast<int64_t>(s.size())};
    };
    struct Case {
      const char* name;
      std::vector<TensorView> inputs;
      DimVector out_strides;
      bool fused = false;  // tile dim 0 fused from two plan dims (Plan::fused)
    };
    const Case cases[] = {
        {"transposed input", {view(a, {R, C}, {C, 1}, 0), view(b, {R, C}, {1, R}, 0)}, {}},
        {"transposed output", {view(a, {R, C}, {C, 1}, 0), view(b, {R, C}, {C, 1}, 0)}, {1, R}},
        {"both inputs transposed, misaligned",
         {view(a, {R, C}, {1, R}, 1), view(b, {R, C}, {1, R}, 0)},
         {}},
        {"reversed rows beside a transposed input",
         {view(a, {R, C}, {-C, 1}, (R - 1) * C), view(b, {R, C}, {1, R}, 1)},
         {}},
        {"channels-first into channels-last, batched",
         {view(a, {B, H, W}, {H * W, 1, H}, 0), view(b, {B, H, W}, {H * W, W, 1}, 0)},
         {}},
        // Dense along its outermost dim: the tile's second dim moves to plan dim 1.
        {"rank 3, input dense along the outermost dim",
         {view(a, {20, 5, 70}, {1, 20 * 70, 20}, 0), view(b, {20, 5, 70}, {5 * 70, 70, 1}, 1)},
         {}},
        // A [5, 17, 3, 4, 18] storage permuted (4, 2, 0, 3, 1): three batch dims.
        {"rank 5, permuted, odd sizes",
         {view(a, {18, 3, 5, 4, 17}, {3 * 5 * 4 * 17, 5 * 4 * 17, 4 * 17, 17, 1}, 0),
          view(b, {18, 3, 5, 4, 17}, {1, 4 * 18, 17 * 3 * 4 * 18, 18, 3 * 4 * 18}, 0)},
         {}},
        // The output's fastest dim short (16, 20) beside a long staged one: tiles 16 deep
        // along it (8-byte types take them for 16 only), partial along both tile dims.
        {"short output dim, 16",
         {view(a, {7, 150, 16}, {150 * 16, 16, 1}, 0),
          view(b, {7, 150, 16}, {16 * 150, 1, 150}, 1)},
         {}},
        {"short output dim, 20, batched",
         {view(a, {5, 140, 20}, {140 * 20, 1, 140}, 1),
          view(b, {5, 140, 20}, {140 * 20, 20, 1}, 0)},
         {}},
        // A [3, 4, 5, 5, 2, 3, 16] storage permuted (6, 4, 2, 0, 5, 3, 1): the output dense
        // along 4 elements only; tile dim 0 fuses them with the next 5, tile dim 1 (the
        // input's 16) with the 3 its run goes on in; partial tiles along both, misaligned.
        {"rank 7, fused tile dims",
         {view(a, {16, 2, 5, 3, 3, 5, 4}, {1, 48, 480, 9600, 16, 96, 2400}, 1),
          view(b, {16, 2, 5, 3, 3, 5, 4}, {1800, 900, 180, 60, 20, 4, 1}, 0)},
         {},
         true},
        // A [3, 8, 5, 4, 32] storage permuted (4, 2, 0, 3, 1), one dim reversed: the output
        // dense along 8, fused with the reversed 3; tile dim 1 (the input's 32) with the 4
        // its run goes on in, which the output is dense along next.
        {"rank 5, fused tile dims, one reversed",
         {view(b, {32, 5, 3, 4, 8}, {1, 128, -5120, 32, 640}, 2 * 5120),
          view(a, {32, 5, 3, 4, 8}, {480, 96, 32, 8, 1}, 1)},
         {},
         true},
        // A [8, 129, 3, 16] storage permuted (3, 2, 1, 0): the output dense along 8, fused
        // with the 129 to 1032 lines (4-byte types: tiles 128 deep, the last of them 8 lines);
        // tile dim 1 the input's 16 with the 3 its run goes on in (partial tiles of 32).
        {"rank 4, fused tile dims 128 deep",
         {view(a, {16, 3, 129, 8}, {1, 16, 48, 6192}, 1),
          view(b, {16, 3, 129, 8}, {3096, 1032, 8, 1}, 0)},
         {},
         true},
        // Lines a multiple of 4 bytes long: 1- and 2-byte types take the word tiles (the
        // dim-0 side 132 past a whole tile, 67 a partial word along the staged dim).
        {"transposed input, lines of whole words",
         {view(a, {68, 132}, {132, 1}, 0), view(b, {68, 132}, {1, 68}, 0)},
         {}},
        {"transposed input in a padded column-major buffer, a partial word",
         {view(a, {67, 132}, {132, 1}, 0), view(b, {67, 132}, {1, 68}, 0)},
         {}},
        {"transposed output of lines of whole words, batched",
         {view(a, {3, 68, 132}, {68 * 132, 132, 1}, 0), view(b, {3, 68, 132}, {0, 132, 1}, 4)},
         {68 * 132, 1, 68}},
    };
    for (const Case& c : cases) {
      for (const char* name : {"add", "maximum", "eq"}) {
        OutputOptions out_options;
        out_options.strides = c.out_strides;
        auto op = PrepareOp(name, c.inputs, {}, out_options);
        ASSERT_TRUE(op.ok()) << op.status();
        EXPECT_EQ(KernelName(op->plan.kernel), KernelName(Kernel::kTiles)) << c.name;
        EXPECT_EQ(op->plan.fused[0] >= 0, c.fused) << c.name;
        const size_t bytes = static_cast<size_t>(op->plan.out_storage_bytes);
        std::vector<std::byte> gpu(bytes), cpu(bytes);
        ASSERT_TRUE(backend_->Run(*op, c.inputs, gpu.data()).ok());
        ASSERT_TRUE(cpu_backend.Run(*op, c.inputs, cpu.data()).ok());
        EXPECT_EQ(std::memcmp(gpu.data(), cpu.data(), bytes), 0)
            << name << " on " << DTypeName(t) << " (" << item << "-byte), " << c.name;
      }
    }
  }
  EXPECT_EQ(device_->memory_in_use(), 0);
}

// Casts through transposed inputs and outputs take the tile kernel, converting as it loads
// and stores: planned for tiles, bit for bit the CPU's result, between every pair of a float,
// half, integer and bool dtype set, odd sizes and a misaligned input; between float32 and
// the 2-byte floats with even sizes too (the paired cast tiles). float32 add, sub, mul
// and div of mixed dtypes take the tiles that convert too; other mixed-dtype ops through the
// same layouts (the cast rows) match as well.
TEST_F(CudaBackendTest, CastsThroughTransposesMatchCpu) {
  constexpr int64_t R = 67, C = 131;
  uint64_t x = testing::TestSeed() ^ 0xc0417ull;
  CpuBackend cpu_backend;
  const DType types[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat64,
                         DType::kInt32,   DType::kInt8,     DType::kUInt8,   DType::kBool};
  std::vector<std::vector<std::byte>> storage;
  const auto tensor = [&](DType t, bool transposed, int64_t offset) {
    storage.push_back(RandomBytes(t, R * C + offset, x));
    if (t == DType::kBool) {
      for (std::byte& b : storage.back()) b &= std::byte{1};
    }
    return TensorView{t,
                      {R, C},
                      transposed ? DimVector{1, R} : DimVector{C, 1},
                      offset,
                      storage.back().data(),
                      static_cast<int64_t>(storage.back().size())};
  };
  const auto check = [&](const std::string& what, const char* op, std::vector<TensorView> in,
                         const AttrMap& attrs, DimVector out_strides,
                         Kernel want = Kernel::kTiles) {
    OutputOptions out_options;
    out_options.strides = std::move(out_strides);
    auto prepared = PrepareOp(op, in, attrs, out_options);
    ASSERT_TRUE(prepared.ok()) << what << ": " << prepared.status();
    EXPECT_EQ(KernelName(prepared->plan.kernel), KernelName(want)) << what;
    const size_t bytes = static_cast<size_t>(prepared->plan.out_storage_bytes);
    std::vector<std::byte> gpu(bytes), cpu(bytes);
    ASSERT_TRUE(backend_->Run(*prepared, in, gpu.data()).ok()) << what;
    ASSERT_TRUE(cpu_backend.Run(*prepared, in, cpu.data()).ok()) << what;
    EXPECT_EQ(std::memcmp(gpu.data(), cpu.data(), bytes), 0) << what;
  };
  for (const DType from : types) {
    for (const DType to : types) {
      if (from == to) continue;
      const std::string name = absl::StrCat(DTypeName(from), " to ", DTypeName(to));
      check(absl::StrCat("cast of a transposed ", name), "cast", {tensor(from, true, 1)},
            {{"dtype", to}}, {});
      check(absl::StrCat("cast into a transposed output, ", name), "cast", {tensor(from, false, 0)},
            {{"dtype", to}}, {1, R});
    }
  }
  // Between float32 and float16 or bfloat16 with the 2-byte side's lines on 4-byte
  // boundaries (even sizes, offsets of 0 and 2 elements): the typed tiles that move the
  // 2-byte side in words, partial tiles along both dims. (int32 and float32 take typed tiles
  // above, at any size.)
  constexpr int64_t R2 = 66, C2 = 130;
  const auto even = [&](DType t, bool transposed, int64_t offset) {
    storage.push_back(RandomBytes(t, R2 * C2 + offset, x));
    return TensorView{t,
                      {R2, C2},
                      transposed ? DimVector{1, R2} : DimVector{C2, 1},
                      offset,
                      storage.back().data(),
                      static_cast<int64_t>(storage.back().size())};
  };
  for (const DType half : {DType::kBFloat16, DType::kFloat16}) {
    for (const int64_t offset : {0, 2}) {
      for (const auto& [from, to] :
           {std::pair{DType::kFloat32, half}, std::pair{half, DType::kFloat32}}) {
        const std::string name =
            absl::StrCat(DTypeName(from), " to ", DTypeName(to), ", offset ", offset);
        check(absl::StrCat("cast of a transposed ", name, ", even sizes"), "cast",
              {even(from, true, offset)}, {{"dtype", to}}, {});
        check(absl::StrCat("cast into a transposed output, ", name, ", even sizes"), "cast",
              {even(from, false, offset)}, {{"dtype", to}}, {1, R2});
      }
    }
  }
  // float32 add, sub, mul and div with a transposed 2-byte operand on 4-byte boundaries, first
  // or second: the typed paired tiles (the add's alpha carried in).
  check("float32 - transposed float16, even sizes", "sub",
        {even(DType::kFloat32, false, 0), even(DType::kFloat16, true, 2)}, {}, {});
  check("transposed bfloat16 / float32, even sizes", "div",
        {even(DType::kBFloat16, true, 0), even(DType::kFloat32, false, 1)}, {}, {});
  check("transposed float16 + 0.5 * float32, even sizes", "add",
        {even(DType::kFloat16, true, 2), even(DType::kFloat32, false, 0)}, {{"alpha", 0.5}}, {});
  // float32 add, sub, mul and div convert in their tiles too; other mixed ops keep the cast
  // rows.
  check("float32 + transposed float16", "add",
        {tensor(DType::kFloat32, false, 0), tensor(DType::kFloat16, true, 3)}, {}, {});
  check("transposed bfloat16 + float32", "add",
        {tensor(DType::kBFloat16, true, 0), tensor(DType::kFloat32, false, 0)}, {}, {});
  check("transposed int32 - float32, misaligned", "sub",
        {tensor(DType::kInt32, true, 1), tensor(DType::kFloat32, false, 3)}, {}, {});
  check("float32 * bfloat16 into a transposed output", "mul",
        {tensor(DType::kFloat32, false, 0), tensor(DType::kBFloat16, false, 1)}, {}, {1, R});
  check("transposed float16 / transposed float32", "div",
        {tensor(DType::kFloat16, true, 0), tensor(DType::kFloat32, true, 0)}, {}, {});
  check("int32 == transposed float32", "eq",
        {tensor(DType::kInt32, false, 0), tensor(DType::kFloat32, true, 0)}, {}, {},
        Kernel::kCastRows);
  check("where(transposed bool, float32, float32)", "where",
        {tensor(DType::kBool, true, 0), tensor(DType::kFloat32, false, 0),
         tensor(DType::kFloat32, false, 0)},
        {}, {}, Kernel::kCastRows);
  check("int8 * uint8 into a transposed output", "mul",
        {tensor(DType::kInt8, false, 0), tensor(DType::kUInt8, false, 1)}, {}, {1, R},
        Kernel::kCastRows);
  check("transposed bfloat16 * float64", "mul",
        {tensor(DType::kBFloat16, true, 0), tensor(DType::kFloat64, false, 0)}, {}, {},
        Kernel::kCastRows);
  EXPECT_EQ(device_->memory_in_use(), 0);
}

// where with a condition that is one element a row (a column of bools broadcast along the
// rows, or a 0-dim one): the where rows kernel copies the chosen operand's row without
// reading the other. Values of 1, 2, 4 and 8 bytes, dense (aligned and one element off) or a
// 0-dim scalar, rows of odd length with partial chunks and one shorter than a chunk: bit for
// bit the CPU's result.
TEST_F(CudaBackendTest, WhereWithOneConditionARowMatchesCpu) {
  uint64_t x = testing::TestSeed() ^ 0x3e7eull;
  CpuBackend cpu_backend;
  std::vector<std::vector<std::byte>> storage;
  const auto bytes = [&](DType t, int64_t n) {
    storage.push_back(RandomBytes(t, n, x));
    if (t == DType::kBool) {
      for (std::byte& b : storage.back()) b &= std::byte{1};
    }
  };
  for (const DType t : {DType::kInt8, DType::kFloat16, DType::kFloat32, DType::kFloat64}) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{67, 1031}, {300, 3}, {5, 4096}}) {
      for (const int64_t offset : {0, 1}) {
        for (const bool zero_dim_cond : {false, true}) {
          for (const bool zero_dim_y : {false, true}) {
            std::vector<TensorView> in;
            bytes(DType::kBool, zero_dim_cond ? 1 : rows);
            in.push_back(
                zero_dim_cond
                    ? TensorView{DType::kBool, {}, {}, 0, storage.back().data(), 1}
                    : TensorView{DType::kBool, {rows, 1}, {1, 1}, 0, storage.back().data(), rows});
            bytes(t, rows * cols + offset);
            in.push_back(TensorView{t,
                                    {rows, cols},
                                    {cols, 1},
                                    offset,
                                    storage.back().data(),
                                    static_cast<int64_t>(storage.back().size())});
            bytes(t, zero_dim_y ? 1 : rows * cols);
            in.push_back(zero_dim_y ? TensorView{t, {}, {}, 0, storage.back().data(), ItemSize(t)}
                                    : TensorView{t,
                                                 {rows, cols},
                                                 {cols, 1},
                                                 0,
                                                 storage.back().data(),
                                                 static_cast<int64_t>(storage.back().size())});
            const std::string what =
                absl::StrCat("where over ", rows, " x ", cols, " ", DTypeName(t), ", offset ",
                             offset, zero_dim_cond ? ", 0-dim condition" : ", condition a column",
                             zero_dim_y ? ", 0-dim y" : "");
            auto prepared = PrepareOp("where", in, {});
            ASSERT_TRUE(prepared.ok()) << what << ": " << prepared.status();
            const size_t n = static_cast<size_t>(prepared->plan.out_storage_bytes);
            std::vector<std::byte> gpu(n), cpu(n);
            ASSERT_TRUE(backend_->Run(*prepared, in, gpu.data()).ok()) << what;
            ASSERT_TRUE(cpu_backend.Run(*prepared, in, cpu.data()).ok()) << what;
            EXPECT_EQ(std::memcmp(gpu.data(), cpu.data(), n), 0) << what;
          }
        }
      }
    }
  }
  EXPECT_EQ(device_->memory_in_use(), 0);
}

// Over 2^31 elements, bit for bit the CPU's result: a contiguous add (the row kernels) and
// the same add with one input fully permuted (rank 4, nothing coalesces: the general kernel,
// launched once a piece that fits 32-bit index math).
// Two uint8 inputs of 512 * m = 2^31 + 1536 elements from the test's seed, flat, and as
// [4, 8, 16, m] grids whose second is fully permuted (b's storage read as [m, 16, 8, 4] and
// seen transposed).
struct PastTwoToThe31 {
  const int64_t m = ((int64_t{1} << 31) >> 9) + 3;
  const int64_t n = 512 * m;
  std::vector<uint8_t> a, b;
  TensorView flat_a, flat_b, grid_a, grid_b;

  PastTwoToThe31() : a(n), b(n) {
    uint64_t x = testing::TestSeed() | 1;
    for (int64_t i = 0; i < n; i += 8) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::memcpy(&a[i], &x, 8);
      const uint64_t y = x * 0x9E3779B97F4A7C15ull;
      std::memcpy(&b[i], &y, 8);
    }
    const auto* pa = reinterpret_cast<const std::byte*>(a.data());
    const auto* pb = reinterpret_cast<const std::byte*>(b.data());
    flat_a = TensorView{DType::kUInt8, {n}, {1}, 0, pa, n};
    flat_b = TensorView{DType::kUInt8, {n}, {1}, 0, pb, n};
    grid_a = TensorView{DType::kUInt8, {4, 8, 16, m}, {8 * 16 * m, 16 * m, m, 1}, 0, pa, n};
    grid_b = TensorView{DType::kUInt8, {4, 8, 16, m}, {1, 4, 32, 512}, 0, pb, n};
  }
};

TEST_F(CudaBackendTest, MoreThanTwoToThe31Elements) {
  const PastTwoToThe31 in;
  const int64_t n = in.n;
  const TensorView &flat_a = in.flat_a, &flat_b = in.flat_b;
  const TensorView &grid_a = in.grid_a, &grid_b = in.grid_b;
  CpuBackend cpu_backend;
  std::vector<uint8_t> gpu(n), cpu(n);
  for (const auto& [va, vb, ndim] :
       {std::tuple{flat_a, flat_b, 1}, std::tuple{grid_a, grid_b, 4}}) {
    const TensorView inputs[] = {va, vb};
    auto op = PrepareOp("add", inputs, {});
    ASSERT_TRUE(op.ok()) << op.status();
    ASSERT_EQ(op->plan.ndim, ndim);
    ASSERT_EQ(op->plan.numel, n);
    ASSERT_TRUE(backend_->Run(*op, inputs, reinterpret_cast<std::byte*>(gpu.data())).ok());
    ASSERT_TRUE(cpu_backend.Run(*op, inputs, reinterpret_cast<std::byte*>(cpu.data())).ok());
    EXPECT_EQ(std::memcmp(gpu.data(), cpu.data(), n), 0) << "rank " << ndim;
  }
  EXPECT_EQ(device_->memory_in_use(), 0);
}

// Device copies of a case's inputs, run through cuda::LaunchOp as the runtime does; says which
// kernel family ran. `shift` moves every input, and `out_shift` the output (-1: by `shift`
// too), that many bytes past an allocation's aligned start.
struct DeviceRun {
  absl::Status status;
  Kernel ran = Kernel::kGeneral;
  std::vector<std::byte> out;
};

DeviceRun RunOnDevice(const PreparedOp& op, const std::vector<TensorView>& inputs,
                      int64_t shift = 0, int64_t out_shift = -1) {
  DeviceRun r;
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  std::vector<void*> owned;
  const auto alloc = [&owned](int64_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, static_cast<size_t>(bytes) + 64), cudaSuccess);
    owned.push_back(p);
    return static_cast<std::byte*>(p);
  };
  std::vector<const std::byte*> data;
  for (const TensorView& v : inputs) {
    std::byte* d = alloc(v.storage_bytes) + shift;
    cudaMemcpy(d, v.data, static_cast<size_t>(v.storage_bytes), cudaMemcpyHostToDevice);
    data.push_back(d);
  }
  const size_t out_bytes = static_cast<size_t>(op.plan.out_storage_bytes);
  std::byte* out = alloc(op.plan.out_storage_bytes) + (out_shift < 0 ? shift : out_shift);
  cudaMemset(out, 0, out_bytes);
  int* error = reinterpret_cast<int*>(alloc(sizeof(int)));
  cudaMemset(error, 0, sizeof(int));
  char* base[kMaxOperands];
  OperandBases(op.plan, out, data, base);
  r.status = cuda::LaunchOp(op, base, cuda::LaunchEnv{sms, nullptr, error, &r.ran});
  r.out.resize(out_bytes);
  EXPECT_EQ(cudaMemcpy(r.out.data(), out, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  for (void* p : owned) cudaFree(p);
  return r;
}

// Each plan runs as the kernel family the planner named (engine_test pins which); results
// computed independently.
TEST_F(CudaBackendTest, RunsTheKernelThePlanNames) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  for (const testing::KernelCase& c : testing::KernelCases(rng)) {
    auto op = c.Prepare();
    ASSERT_TRUE(op.ok()) << c.name << ": " << op.status();
    const DeviceRun r = RunOnDevice(*op, c.Views());
    ASSERT_TRUE(r.status.ok()) << c.name << ": " << r.status;
    EXPECT_EQ(KernelName(r.ran), KernelName(op->plan.kernel)) << c.name;
    EXPECT_EQ(testing::CheckKernelCase(c, *op, r.out), "") << c.name << " (seed " << seed << ")";
  }
  // What only the launch knows: rows whose first elements are not 16-byte aligned take the
  // casting row kernel, which moves them element by element (rows over more than two dims,
  // the general kernel). Misaligned inputs beside an aligned output may also take the
  // same-dtype row kernel's shifted loads (1- and 2-byte types): either way, the same
  // results.
  for (const testing::KernelCase& c : testing::KernelCases(rng)) {
    auto op = c.Prepare();
    ASSERT_TRUE(op.ok());
    if (op->plan.kernel != Kernel::kRows) continue;
    const DeviceRun r = RunOnDevice(*op, c.Views(), /*shift=*/4);
    ASSERT_TRUE(r.status.ok()) << c.name << ": " << r.status;
    // (Rows over more than two dims run as the general kernel then.)
    const Kernel want = op->plan.ndim > 3 ? Kernel::kGeneral : Kernel::kCastRows;
    EXPECT_EQ(KernelName(r.ran), KernelName(want)) << c.name << ", shifted by 4 bytes";
    EXPECT_EQ(testing::CheckKernelCase(c, *op, r.out), "")
        << c.name << ", shifted (seed " << seed << ")";
    // Every shift that keeps each operand's elements aligned to their size.
    int64_t item = 1;
    for (int k = 0; k < op->plan.num_operands; ++k)
      item = std::max(item, ItemSize(op->plan.dtypes[k]));
    for (int64_t shift = item; shift < 16; shift += item) {
      const DeviceRun in_only = RunOnDevice(*op, c.Views(), shift, /*out_shift=*/0);
      ASSERT_TRUE(in_only.status.ok()) << c.name << ": " << in_only.status;
      EXPECT_EQ(testing::CheckKernelCase(c, *op, in_only.out), "")
          << c.name << ", inputs shifted by " << shift << " (seed " << seed << ")";
    }
  }
}

// Row slices x[:, s:s + cols] beside contiguous operands and outputs, every row start aligned
// differently (rows of every length from one element to several blocks' worth, 1- to 8-byte
// types, mixed with float32 on either side, a broadcast row and a 0-dim operand): the row
// kernels, bit for bit the CPU's result.
TEST_F(CudaBackendTest, RowSlicesMatchCpu) {
  uint64_t x = testing::TestSeed() ^ 0x5e1ull;
  CpuBackend cpu_backend;
  constexpr int64_t R = 37;
  for (const DType t :
       {DType::kInt8, DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    for (const int64_t cols : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{1000}, int64_t{4099}}) {
      const int64_t wide = cols + 5;
      const std::vector<std::byte> a = RandomBytes(t, R * wide, x), b = RandomBytes(t, R * cols, x);
      const std::vector<std::byte> f = RandomBytes(DType::kFloat32, R * wide, x);
      // Dims by reference: GCC 12 takes a moved-from empty DimVector for uninitialized.
      const auto view = [](DType dt, const std::vector<std::byte>& s, const DimVector& shape,
                           const DimVector& strides, int64_t offset) {
        return TensorView{dt, shape, strides, offset, s.data(), static_cast<int64_t>(s.size())};
      };
      struct Case {
        std::string name;
        const char* op;
        std::vector<TensorView> inputs;
        DimVector out_strides;
      };
      std::vector<Case> cases;
      for (const int64_t s : {int64_t{0}, int64_t{1}, int64_t{3}}) {
        const TensorView sliced = view(t, a, {R, cols}, {wide, 1}, s);
        cases.push_back({absl::StrCat("slice at ", s, " + dense"),
                         "add",
                         {sliced, view(t, b, {R, cols}, {cols, 1}, 0)},
                         {}});
        cases.push_back({absl::StrCat("slice at ", s, " max, into a sliced output"),
                         "maximum",
                         {view(t, b, {R, cols}, {cols, 1}, 0), sliced},
                         {wide, 1}});
        cases.push_back({absl::StrCat("slice at ", s, " eq a broadcast row"),
                         "eq",
                         {sliced, view(t, b, {cols}, {1}, 0)},
                         {}});
        cases.push_back({absl::StrCat("slice at ", s, " + a 0-dim tensor"),
                         "sub",
                         {sliced, view(t, b, {}, {}, 0)},
                         {}});
        cases.push_back({absl::StrCat("slice at ", s, " * float32 slice at 2"),
                         "mul",
                         {sliced, view(DType::kFloat32, f, {R, cols}, {wide, 1}, 2)},
                         {}});
        cases.push_back({absl::StrCat("float32 slice at ", s, " - slice at ", s),
                         "sub",
                         {view(DType::kFloat32, f, {R, cols}, {wide, 1}, s), sliced},
                         {}});
        cases.push_back({absl::StrCat("slice at ", s, " reversed rows"),
                         "add",
                         {view(t, a, {R, cols}, {-wide, 1}, (R - 1) * wide + s),
                          view(t, b, {R, cols}, {cols, 1}, 0)},
                         {}});
      }
      for (const Case& c : cases) {
        OutputOptions out_options;
        out_options.strides = c.out_strides;
        auto op = PrepareOp(c.op, c.inputs, {}, out_options);
        ASSERT_TRUE(op.ok()) << c.name << ": " << op.status();
        const DeviceRun r = RunOnDevice(*op, c.inputs);
        ASSERT_TRUE(r.status.ok()) << c.name << ": " << r.status;
        const std::string where =
            absl::StrCat(c.op, " on ", DTypeName(t), ", ", cols, " columns, ", c.name);
        EXPECT_TRUE(r.ran == Kernel::kRows || r.ran == Kernel::kCastRows)
            << where << ": ran " << KernelName(r.ran);
        std::vector<std::byte> cpu(static_cast<size_t>(op->plan.out_storage_bytes));
        ASSERT_TRUE(cpu_backend.Run(*op, c.inputs, cpu.data()).ok());
        // Bytes of a strided output's storage that no element covers stay 0 on both sides.
        EXPECT_EQ(std::memcmp(r.out.data(), cpu.data(), cpu.size()), 0) << where;
      }
    }
  }
}

// Rows of the one-pass row kernel (kRowOnePass: float32 and float64 long math): one long row
// whose last block is partial (and a thread's second pack past the row) and one shorter than
// a block (both one row of dense operands: FlatRowKernel), rows apart in memory, short rows
// several to a block, an input repeated along the rows and one repeated everywhere (the
// one-pass kernel); gelu's erf form in float64 takes the looping kernel for rows and its own
// flat kernel for one row; pow (float64 in one pass) over a second input of the same layout.
// Against the CPU within a few ulps (the GPU's math library is not the host's; gelu's tanh
// form differs where 1 + tanh cancels).
TEST_F(CudaBackendTest, OnePassRowsMatchCpu) {
  std::mt19937_64 rng(testing::TestSeed() ^ 0x0e9a55ull);
  CpuBackend cpu_backend;
  for (const DType t : {DType::kFloat32, DType::kFloat64}) {
    const int64_t item = ItemSize(t);
    for (const char* name : {"exp", "expm1", "sin", "cos", "log", "erf", "tanh", "sigmoid", "silu",
                             "gelu", "gelu_tanh", "pow"}) {
      const bool binary = std::string(name) == "pow";
      const bool positive = std::string(name) == "log" || binary;
      struct Shape {
        DimVector shape, strides;
        int64_t elems;  // of storage
      };
      // Row strides a multiple of 16 bytes past the row: rows that do not coalesce.
      const std::vector<Shape> shapes = {
          {{1, 100000}, {100000, 1}, 100000}, {{1, 24}, {24, 1}, 24},
          {{37, 1000}, {1004, 1}, 37 * 1004}, {{3001, 8}, {12, 1}, 3001 * 12},
          {{5, 1000}, {0, 1}, 1000},          {{64, 64}, {0, 0}, 1}};
      for (const Shape& sh : shapes) {
        const auto random = [&](double lo) {
          std::uniform_real_distribution<double> dist(lo, 4.0);
          std::vector<std::byte> storage(static_cast<size_t>(sh.elems * item));
          for (int64_t i = 0; i < sh.elems; ++i) {
            const double v = dist(rng);
            if (t == DType::kFloat32) {
              const float f = static_cast<float>(v);
              std::memcpy(storage.data() + i * item, &f, sizeof f);
            } else {
              std::memcpy(storage.data() + i * item, &v, sizeof v);
            }
          }
          return storage;
        };
        const std::vector<std::byte> storage = random(positive ? 0.01 : -4.0);
        const std::vector<std::byte> exponents = random(-4.0);
        std::vector<TensorView> inputs = {TensorView{t, sh.shape, sh.strides, 0, storage.data(),
                                                     static_cast<int64_t>(storage.size())}};
        if (binary) {
          inputs.push_back(TensorView{t, sh.shape, sh.strides, 0, exponents.data(),
                                      static_cast<int64_t>(exponents.size())});
        }
        AttrMap attrs;
        const bool tanh_form = std::string(name) == "gelu_tanh";
        if (tanh_form) attrs["approximate"] = std::string("tanh");
        auto op = PrepareOp(tanh_form ? "gelu" : name, inputs, attrs);
        ASSERT_TRUE(op.ok()) << name << ": " << op.status();
        const DeviceRun r = RunOnDevice(*op, inputs);
        const std::string where =
            absl::StrCat(name, " on ", DTypeName(t), ", shape ", sh.shape[0], " x ", sh.shape[1]);
        ASSERT_TRUE(r.status.ok()) << where << ": " << r.status;
        EXPECT_EQ(r.ran, Kernel::kRows) << where << ": ran " << KernelName(r.ran);
        std::vector<std::byte> cpu(static_cast<size_t>(op->plan.out_storage_bytes));
        ASSERT_TRUE(cpu_backend.Run(*op, inputs, cpu.data()).ok()) << where;
        const int64_t n = op->plan.out_storage_bytes / item;
        const double rel = t == DType::kFloat32 ? 4e-6 : 1e-12;
        const double abs = t == DType::kFloat32 ? 1e-6 : 1e-15;
        int bad = 0;
        for (int64_t i = 0; i < n; ++i) {
          double g, c;
          if (t == DType::kFloat32) {
            float gf, cf;
            std::memcpy(&gf, r.out.data() + i * item, sizeof gf);
            std::memcpy(&cf, cpu.data() + i * item, sizeof cf);
            g = gf, c = cf;
          } else {
            std::memcpy(&g, r.out.data() + i * item, sizeof g);
            std::memcpy(&c, cpu.data() + i * item, sizeof c);
          }
          if (!(std::fabs(g - c) <= rel * std::fabs(c) + abs) && bad++ < 3) {
            ADD_FAILURE() << where << ": element " << i << " is " << g << ", the CPU's " << c;
          }
        }
        EXPECT_EQ(bad, 0) << where;
      }
    }
  }
}

// One-dimensional views at every element offset within 16 bytes beside dense operands and a
// dense output: the cast-row kernel's loads of dense misaligned chunks (aligned blocks
// shifted into place), full chunks and the partial last one, same and mixed dtypes, unary
// ops and casts (widening, narrowing: the kernel's chunks a thread differ), and
// where's own row kernel (condition and values misaligned, repeated, 0-dim), bit for bit the
// CPU's result.
TEST_F(CudaBackendTest, OffsetViewsMatchCpu) {
  uint64_t x = testing::TestSeed() ^ 0x0ff5e7ull;
  CpuBackend cpu_backend;
  const auto view = [](DType dt, const std::vector<std::byte>& s, int64_t n, int64_t offset) {
    return TensorView{dt, {n}, {1}, offset, s.data(), static_cast<int64_t>(s.size())};
  };
  for (const DType t : {DType::kInt8, DType::kUInt8, DType::kFloat16, DType::kBFloat16,
                        DType::kFloat64, DType::kInt64}) {
    for (const int64_t n : {int64_t{5}, int64_t{4099}, int64_t{70001}}) {
      const int64_t per16 = 16 / ItemSize(t);
      const std::vector<std::byte> a = RandomBytes(t, n + per16, x),
                                   b = RandomBytes(t, n + per16, x);
      const std::vector<std::byte> f = RandomBytes(DType::kFloat32, n, x);
      std::vector<std::byte> cond = RandomBytes(DType::kBool, n + 16, x);
      for (std::byte& c : cond) c &= std::byte{1};
      for (int64_t s = 0; s < per16; ++s) {
        struct Case {
          const char* op;
          std::vector<TensorView> inputs;
          AttrMap attrs = {};
        };
        const Case cases[] = {
            {"abs", {view(t, a, n, s)}},
            {"cast", {view(t, a, n, s)}, {{"dtype", DType::kFloat64}}},
            {"cast", {view(t, a, n, s)}, {{"dtype", DType::kInt8}}},
            {"cast", {view(t, a, n, 0)}, {{"dtype", DType::kInt64}}},
            {"mul", {view(t, a, n, s), view(t, b, n, 0)}},
            {"add", {view(t, b, n, 0), view(t, a, n, s)}},
            {"sub", {view(t, a, n, s), view(t, b, n, (s + 1) % per16)}},
            {"mul", {view(t, a, n, s), view(DType::kFloat32, f, n, 0)}},
            {"where", {view(DType::kBool, cond, n, s % 16), view(t, a, n, s), view(t, b, n, 0)}},
            {"where", {view(DType::kBool, cond, n, 0), view(t, b, n, 0), view(t, a, n, s)}},
            {"where",
             {TensorView{DType::kBool, {}, {}, s, cond.data(), static_cast<int64_t>(cond.size())},
              view(t, a, n, s), view(t, b, n, 0)}},
            {"where",
             {view(DType::kBool, cond, n, 3),
              TensorView{t, {}, {}, s, a.data(), static_cast<int64_t>(a.size())},
              view(t, b, n, s)}},
        };
        for (const Case& c : cases) {
          auto op = PrepareOp(c.op, c.inputs, c.attrs, OutputOptions{});
          ASSERT_TRUE(op.ok()) << c.op << ": " << op.status();
          const DeviceRun r = RunOnDevice(*op, c.inputs);
          const std::string where =
              absl::StrCat(c.op, " on ", DTypeName(t), ", ", n, " elements, offset ", s, " (",
                           DTypeName(c.inputs[0].dtype), " first)");
          ASSERT_TRUE(r.status.ok()) << where << ": " << r.status;
          std::vector<std::byte> cpu(static_cast<size_t>(op->plan.out_storage_bytes));
          ASSERT_TRUE(cpu_backend.Run(*op, c.inputs, cpu.data()).ok());
          EXPECT_EQ(std::memcmp(r.out.data(), cpu.data(), cpu.size()), 0) << where;
        }
      }
    }
  }
}

std::unique_ptr<runtime::Device> MakeCuda(const runtime::DeviceOptions& options) {
  auto d = runtime::CudaDevice::Create(0, options);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

// The small-request path: inputs and output packed into one staging buffer and one block.
TEST_F(CudaBackendTest, SmallPathMatchesTheReference) {
  runtime::DeviceBackend small(device_.get(), /*small_first=*/true);
  testing::ConformanceOptions options;
  options.max_numel = 4096;
  testing::CheckConformance(small, testing::TestSeed() ^ 0x51ull, options);
  options.every_dtype_combination = true;
  options.max_numel = 512;
  testing::CheckConformance(small, testing::TestSeed() ^ 0x52ull, options);
  EXPECT_EQ(device_->memory_in_use(), 0);
}

// Between two GPUs where the machine has them (peer access where they can reach each other),
// else between two devices on GPU 0 (a plain device-to-device copy).
TEST_F(CudaBackendTest, CopiesBetweenDevices) {
  const int second = runtime::CudaDevice::Count() > 1 ? 1 : 0;
  auto a = runtime::CudaDevice::Create(0, {});
  auto b = runtime::CudaDevice::Create(second, {});
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
  runtime::CudaDevice::ConnectPeers({a->get(), b->get()});
  std::printf("device 0 -> device %d, peer access: %s\n", second,
              (*b)->info().peers.empty() ? "no" : "yes");
  testing::CheckCopiesBetween(**a, **b);
  testing::CheckCopiesBetween(**b, **a);
}

TEST_F(CudaBackendTest, Budget) { testing::CheckBudget(MakeCuda); }
TEST_F(CudaBackendTest, Copies) { testing::CheckCopies(MakeCuda); }
TEST_F(CudaBackendTest, ConcurrentRunsShareStreams) { testing::CheckConcurrentRuns(MakeCuda); }

}  // namespace
}  // namespace tc

namespace tc {
namespace {

// An expression's kernel is compiled once: a second request for the same tree with other
// literals and attributes is a cache hit and computes with its own values.
TEST_F(CudaBackendTest, ExpressionKernelsAreCompiledOnceAndShared) {
  std::vector<float> x(1000), y(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.25f - 100.0f;
  TensorView v;
  v.dtype = DType::kFloat32;
  v.shape = {1000};
  v.strides = {1};
  v.storage_bytes = 4000;
  v.data = reinterpret_cast<const std::byte*>(x.data());
  // Every request waits for the kernel here: the second one must find it.
  const cuda::StepMode mode = cuda::ExprKernelCache::Shared().step_mode();
  cuda::ExprKernelCache::Shared().SetStepMode(cuda::StepMode::kNever);
  cuda::ExprKernelCache& cache = cuda::ExprKernelCache::Shared();
  const cuda::ExprCacheStats before = cache.stats();
  for (double bound : {0.0, 7.5}) {
    const std::string text = absl::StrCat("clamp(a * 2 + 1, min=", bound, ") - 0.5");
    auto p = expr::PrepareExpression(text, {}, {v});
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE(backend_->Run(*p, {v}, reinterpret_cast<std::byte*>(y.data())).ok());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(y[i], std::max(x[i] * 2.0f + 1.0f, static_cast<float>(bound)) - 0.5f)
          << text << " at " << i;
    }
  }
  const cuda::ExprCacheStats after = cache.stats();
  EXPECT_LE(after.compiles - before.compiles, 1u);
  EXPECT_GE(after.hits - before.hits, 1u);
  EXPECT_EQ(after.compile_failures, before.compile_failures);
  cache.SetStepMode(mode);
}

// Kernels kept on disk come back in another cache (a restarted server) without NVRTC; a
// damaged entry is refused and compiled again.
TEST_F(CudaBackendTest, ExpressionKernelsComeBackFromDisk) {
  char tmpl[] = "/tmp/tc-cuda-kernels-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  const int arch = prop.major * 10 + prop.minor;
  std::vector<float> x(1000);
  TensorView v;
  v.dtype = DType::kFloat32;
  v.shape = {1000};
  v.strides = {1};
  v.storage_bytes = 4000;
  v.data = reinterpret_cast<const std::byte*>(x.data());
  auto p = expr::PrepareExpression("tanh(a * 3) + sqrt(abs(a)) * 0.25", {}, {v});
  ASSERT_TRUE(p.ok()) << p.status();
  char* base[2] = {nullptr, nullptr};
  const std::string source = cuda::PrepareExprLaunch(*p->expression, base, 132, arch).source;
  auto get = [&](cuda::ExprKernelCache& cache) {
    std::promise<absl::Status> done;
    cache.Get(source, arch, [&](absl::StatusOr<std::shared_ptr<const cuda::ExprKernel>> k) {
      done.set_value(k.status());
    });
    return done.get_future().get();
  };
  auto open = [&] {
    auto d = rtc::DiskCache::Open(dir, 64 << 20);
    EXPECT_TRUE(d.ok()) << d.status();
    return std::shared_ptr<rtc::DiskCache>(*std::move(d));
  };
  {
    cuda::ExprKernelCache first(cuda::ExprKernelCache::Options{});
    first.UseDisk(open());
    ASSERT_TRUE(get(first).ok());
    EXPECT_EQ(first.stats().compiles, 1u);
    EXPECT_EQ(first.stats().disk.stores, 1u);
  }
  std::string path;
  {
    cuda::ExprKernelCache restarted(cuda::ExprKernelCache::Options{});
    auto disk = open();
    restarted.UseDisk(disk);
    ASSERT_TRUE(get(restarted).ok());
    EXPECT_EQ(restarted.stats().compiles, 0u);
    EXPECT_EQ(restarted.stats().disk_loads, 1u);
    path = disk->PathFor(rtc::DiskKey(source, arch));
  }
  {
    // One byte of the kernel changed: refused, compiled again, stored again.
    FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, -100, SEEK_END);
    const int c = std::fgetc(f);
    std::fseek(f, -100, SEEK_END);
    std::fputc(c ^ 1, f);
    std::fclose(f);
    cuda::ExprKernelCache damaged(cuda::ExprKernelCache::Options{});
    damaged.UseDisk(open());
    ASSERT_TRUE(get(damaged).ok());
    EXPECT_EQ(damaged.stats().disk.rejected, 1u);
    EXPECT_EQ(damaged.stats().compiles, 1u);
    EXPECT_EQ(damaged.stats().disk.stores, 1u);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tc

namespace tc {
namespace {

// Sets the shared kernel cache's step mode for a scope.
class StepModeScope {
 public:
  explicit StepModeScope(cuda::StepMode mode)
      : before_(cuda::ExprKernelCache::Shared().step_mode()) {
    cuda::ExprKernelCache::Shared().SetStepMode(mode);
  }
  ~StepModeScope() { cuda::ExprKernelCache::Shared().SetStepMode(before_); }

 private:
  cuda::StepMode before_;
};

// An expression over 2^31 elements and more through its kernel, bit for bit the CPU's: rank 4
// with one input fully permuted (nothing coalesces), the ops' general walk launched once a
// piece of the space that fits 32-bit index math, as the ops' general kernel is.
TEST_F(CudaBackendTest, ExpressionOverMoreThanTwoToThe31Elements) {
  StepModeScope scope(cuda::StepMode::kNever);
  const PastTwoToThe31 in;
  const int64_t n = in.n;
  const TensorView inputs[] = {in.grid_a, in.grid_b};
  auto p = expr::PrepareExpression("a * 3 + (b ^ a)", {}, inputs);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(KernelName(p->expression->walk.kernel), KernelName(Kernel::kGeneral));
  std::vector<uint8_t> gpu(n), cpu(n);
  ASSERT_TRUE(backend_->Run(*p, inputs, reinterpret_cast<std::byte*>(gpu.data())).ok());
  CpuBackend cpu_backend;
  ASSERT_TRUE(cpu_backend.Run(*p, inputs, reinterpret_cast<std::byte*>(cpu.data())).ok());
  EXPECT_EQ(std::memcmp(gpu.data(), cpu.data(), n), 0);
  EXPECT_EQ(device_->memory_in_use(), 0);
}

// An expression run as its ops one by one (what answers it while its kernel compiles) gives
// the compiled kernel's bytes and the CPU's: broadcasts, a transposed and a reversed input,
// a 0-dim tensor, mixed dtypes, literals, a bool result, an output laid out like a transposed
// input, and temporaries too large for one pass (cut into slabs, the last one shorter).
TEST_F(CudaBackendTest, ExpressionStepsMatchTheKernelAndCpu) {
  uint64_t x = testing::TestSeed() ^ 0x57e95ull;
  CpuBackend cpu_backend;
  constexpr int64_t R = 300, C = 257, N = 4096;
  const auto f32 = RandomBytes(DType::kFloat32, R * C, x),
             f32b = RandomBytes(DType::kFloat32, R * C, x);
  const auto f16 = RandomBytes(DType::kFloat16, R * C, x), f64 = RandomBytes(DType::kFloat64, R, x);
  const auto i8 = RandomBytes(DType::kInt8, R * C, x), i32 = RandomBytes(DType::kInt32, R * C, x);
  const auto big_a = RandomBytes(DType::kFloat32, N * N, x),
             big_b = RandomBytes(DType::kFloat32, N * N, x);
  const auto view = [](DType dt, const std::vector<std::byte>& s, const DimVector& shape,
                       const DimVector& strides, int64_t offset) {
    return TensorView{dt, shape, strides, offset, s.data(), static_cast<int64_t>(s.size())};
  };
  struct Case {
    std::string text;
    std::vector<TensorView> inputs;
    OutputOptions::Layout layout = OutputOptions::Layout::kContiguous;
    // The CPU's exp is not the GPU's: a float32 result within a few ulps of the CPU's.
    bool exact_on_cpu = true;
  };
  const std::vector<Case> cases = {
      {"sigmoid(a * b + 1) * a",
       {view(DType::kFloat32, f32, {R, C}, {C, 1}, 0), view(DType::kFloat32, f32b, {C}, {1}, 3)},
       OutputOptions::Layout::kContiguous,
       false},
      {"where(a > b, a - 2, b * 3)",
       {view(DType::kFloat16, f16, {C, R}, {1, C}, 0), view(DType::kFloat32, f32b, {}, {}, 7)}},
      {"cast(a, float32) * 0.5 + b",
       {view(DType::kInt8, i8, {R, C}, {-C, -1}, R * C - 1),
        view(DType::kFloat64, f64, {R, 1}, {1, 1}, 0)}},
      {"(a * 2) > b - a",
       {view(DType::kInt32, i32, {R, C}, {C, 1}, 0), view(DType::kInt8, i8, {R, C}, {1, R}, 0)}},
      {"abs(a) * b + a",
       {view(DType::kFloat32, f32, {C, R}, {1, C}, 0),
        view(DType::kFloat32, f32b, {C, R}, {R, 1}, 0)},
       OutputOptions::Layout::kLikeFirstInput},
      {"((a * b + a) * b - a) / 3",
       {view(DType::kFloat32, big_a, {N, N}, {N, 1}, 0),
        view(DType::kFloat32, big_b, {N, N}, {N, 1}, 0)}},
  };
  for (const Case& c : cases) {
    OutputOptions output;
    output.layout = c.layout;
    auto p = expr::PrepareExpression(c.text, {}, c.inputs, output);
    ASSERT_TRUE(p.ok()) << c.text << ": " << p.status();
    const size_t bytes = static_cast<size_t>(p->plan.out_storage_bytes);
    std::vector<std::byte> stepwise(bytes), fused(bytes), cpu(bytes);
    const uint64_t before = cuda::ExprKernelCache::Shared().stats().stepwise;
    {
      StepModeScope always(cuda::StepMode::kAlways);
      ASSERT_TRUE(backend_->Run(*p, c.inputs, stepwise.data()).ok()) << c.text;
    }
    EXPECT_EQ(cuda::ExprKernelCache::Shared().stats().stepwise, before + 1) << c.text;
    {
      StepModeScope never(cuda::StepMode::kNever);
      ASSERT_TRUE(backend_->Run(*p, c.inputs, fused.data()).ok()) << c.text;
    }
    ASSERT_TRUE(cpu_backend.Run(*p, c.inputs, cpu.data()).ok()) << c.text;
    EXPECT_EQ(std::memcmp(stepwise.data(), fused.data(), bytes), 0)
        << c.text << ": steps against the kernel";
    if (c.exact_on_cpu) {
      EXPECT_EQ(std::memcmp(stepwise.data(), cpu.data(), bytes), 0)
          << c.text << ": steps against the CPU";
    } else {
      ASSERT_EQ(p->plan.out_dtype, DType::kFloat32);
      for (size_t i = 0; i < bytes; i += 4) {
        float u, v;
        std::memcpy(&u, stepwise.data() + i, 4);
        std::memcpy(&v, cpu.data() + i, 4);
        ASSERT_NEAR(u, v, 1e-6 * (1 + std::fabs(v))) << c.text << " at " << i / 4;
      }
    }
  }
  // The large case's temporaries (two float32 values of N x N) pass the bound: slabs.
  auto p = expr::PrepareExpression(cases.back().text, {}, cases.back().inputs);
  ASSERT_TRUE(p.ok());
  char* base[3] = {reinterpret_cast<char*>(64), reinterpret_cast<char*>(64),
                   reinterpret_cast<char*>(64)};
  std::shared_ptr<const cuda::StepRun> run = cuda::PrepareSteps(*p->expression, base);
  ASSERT_NE(run, nullptr);
  EXPECT_LT(run->slab, run->outer);
  EXPECT_FALSE(run->last.empty());
  EXPECT_LE(run->scratch_bytes, cuda::kStepScratchBytes);
  // Where even one index of the outermost dim does not fit, the kernel is the way.
  EXPECT_EQ(cuda::PrepareSteps(*p->expression, base, 100), nullptr);
}

// Integer division by zero in a step is the error the kernel gives, naming the op.
TEST_F(CudaBackendTest, ExpressionStepsReportDivisionByZero) {
  std::vector<int32_t> a(1000, 7), b(1000, 2);
  b[517] = 0;
  const TensorView va{DType::kInt32, {1000}, {1}, 0, reinterpret_cast<const std::byte*>(a.data()),
                      4000};
  const TensorView vb{DType::kInt32, {1000}, {1}, 0, reinterpret_cast<const std::byte*>(b.data()),
                      4000};
  auto p = expr::PrepareExpression("(a + 1) // b - 3", {}, {va, vb});
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<int32_t> out(1000);
  absl::Status kinds[2];
  int i = 0;
  for (cuda::StepMode mode : {cuda::StepMode::kAlways, cuda::StepMode::kNever}) {
    StepModeScope scope(mode);
    kinds[i++] = backend_->Run(*p, {va, vb}, reinterpret_cast<std::byte*>(out.data()));
  }
  EXPECT_EQ(kinds[0].code(), absl::StatusCode::kInvalidArgument) << kinds[0];
  EXPECT_EQ(kinds[0], kinds[1]);
  // And the device is healthy after it.
  b[517] = 5;
  StepModeScope scope(cuda::StepMode::kAlways);
  ASSERT_TRUE(backend_->Run(*p, {va, vb}, reinterpret_cast<std::byte*>(out.data())).ok());
  EXPECT_EQ(out[517], 8 / 5 - 3);
}

// By default a new expression is answered by its steps at once while its kernel compiles
// behind them; once compiled, the kernel answers.
TEST_F(CudaBackendTest, NewExpressionsRunAsStepsWhileCompiling) {
  StepModeScope scope(cuda::StepMode::kWhileCompiling);
  std::vector<double> a(5000), out(5000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(i) * 0.01 - 20;
  const TensorView va{
      DType::kFloat64, {5000}, {1}, 0, reinterpret_cast<const std::byte*>(a.data()), 40000};
  // A tree no other test uses, so its kernel is new.
  const std::string text = "expm1(a * 0.5) - sin(a) * 3";
  auto p = expr::PrepareExpression(text, {}, {va});
  ASSERT_TRUE(p.ok()) << p.status();
  cuda::ExprKernelCache& cache = cuda::ExprKernelCache::Shared();
  const cuda::ExprCacheStats before = cache.stats();
  ASSERT_TRUE(backend_->Run(*p, {va}, reinterpret_cast<std::byte*>(out.data())).ok());
  const std::vector<double> first = out;
  EXPECT_EQ(cache.stats().stepwise, before.stepwise + 1);
  // The compilation it started finishes behind it.
  for (int i = 0; i < 600 && cache.stats().compiles + cache.stats().compile_failures ==
                                 before.compiles + before.compile_failures;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(cache.stats().compiles, before.compiles + 1);
  const uint64_t hits = cache.stats().hits;
  ASSERT_TRUE(backend_->Run(*p, {va}, reinterpret_cast<std::byte*>(out.data())).ok());
  EXPECT_EQ(cache.stats().hits, hits + 1);
  EXPECT_EQ(std::memcmp(first.data(), out.data(), out.size() * sizeof(double)), 0);
}

}  // namespace
}  // namespace tc
