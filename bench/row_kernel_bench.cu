// The CUDA row kernel alone, over the packs a thread keeps in flight (U) and the block size:
// what the per-op choices (kLongMath, kRowPacks, kRowOnePass in kernels/ops/op_spec.h) and the row
// grid (kernels/cuda/launch.cuh) were measured with. 2^26 elements of every type in one dense row,
// values uniform in [-4, 4] (log in [0.01, 4]; integers in [0, 100)); each launch timed with
// events, the median of 30 after 3 warm-up launches, beside a device copy of one operand's
// bytes.
//
//   tensorcompute-row-kernel-bench            every op below
//   tensorcompute-row-kernel-bench tanh f64   the lines whose name holds every word given
//   tensorcompute-row-kernel-bench --waves erf f64
//                                             also grids capped at 4, 16, 32 and 64 rounds of
//                                             resident blocks, each thread looping over its packs
//   tensorcompute-row-kernel-bench add_rows_unaligned
//                                             the peeled rows of misaligned outputs alone
// Floating ops also in the one-pass kernel (OnePassRowKernel) at 1, 2 and 4 packs a thread
// (lines ending "one pass") and from the operands' bases (FlatRowKernel) at 1 and 2 (lines
// ending "flat").
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/event_timing.cuh"
#include "kernels/cuda/row_kernel.cuh"
#include "kernels/cuda/where_kernel.cuh"
#include "kernels/ops/binary.h"
#include "kernels/ops/compare.h"
#include "kernels/ops/misc.h"
#include "kernels/ops/unary.h"

namespace tc::cuda {
namespace {

using bench::Check;
using bench::MedianMs;

template <typename S>
__global__ void FillKernel(S* p, int64_t n, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    const float u = static_cast<float>(h & 0xffffff) / 16777216.0f;
    const float v = lo + (hi - lo) * u;
    p[i] = static_cast<S>(std::is_integral_v<S> ? floorf(v) : v);
  }
}

struct Buffers {
  char* in[2] = {};
  char* out = nullptr;
  int64_t bytes = 0;  // per operand
};

std::vector<std::string> g_filter;
bool g_waves = false;

bool Selected(const std::string& name) {
  for (const std::string& w : g_filter) {
    if (name.find(w) == std::string::npos) return false;
  }
  return true;
}

// One dense row of n elements of S: b's output and its first N inputs.
template <typename S, int N>
RowArgs<N + 1> DenseRow(const Buffers& b, int64_t n) {
  RowArgs<N + 1> a{};
  a.rows = 1;
  a.inner_rows = 1;
  a.cols = n;
  a.base[0] = b.out;
  for (int k = 0; k < N; ++k) a.base[k + 1] = b.in[k];
  for (int k = 0; k <= N; ++k) {
    a.step[k] = sizeof(S);
    a.dtype[k] = DTypeOf<S>();
    a.access[k] = Access::kVector;
  }
  return a;
}

template <typename S, int N, int U, int V = static_cast<int>(16 / sizeof(S)), typename F>
void TimeOne(const std::string& name, const F& f, const Buffers& b, int threads, float copy_ms,
             int waves = 0) {
  const int64_t n = b.bytes / static_cast<int64_t>(sizeof(S));
  const RowArgs<N + 1> a = DenseRow<S, N>(b, n);
  const int64_t per_thread = static_cast<int64_t>(V) * U;
  const dim3 block(threads, 1);
  int64_t blocks = (n + per_thread * threads - 1) / (per_thread * threads);
  char grid_note[48] = "";
  if (waves > 0) {
    // A grid of `waves` rounds of the blocks the SMs hold at once: the row kernel's grid-stride
    // loop gives each thread several steps.
    int per_sm = 0, sms = 0;
    Check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, RowKernel<S, N, V, U, F>, threads,
                                                        0),
          "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    Check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0),
          "cudaDeviceGetAttribute");
    blocks = std::min<int64_t>(blocks, int64_t{waves} * per_sm * sms);
    std::snprintf(grid_note, sizeof grid_note, " waves=%d (%lld blocks)", waves,
                  static_cast<long long>(blocks));
  }
  const dim3 grid(static_cast<unsigned>(blocks), 1);
  const float ms = MedianMs([&] { RowKernel<S, N, V, U><<<grid, block>>>(f, a); });
  cudaFuncAttributes attr{};
  Check(cudaFuncGetAttributes(&attr, RowKernel<S, N, V, U, F>), "cudaFuncGetAttributes");
  std::printf("%-22s V=%2d U=%d threads=%3d registers=%3d  %.4f ms  %5.1f%% of copy%s\n",
              name.c_str(), V, U, threads, attr.numRegs, ms,
              100.0 * copy_ms * (N + 1) / 2 / ms,  // copy_ms moves 2 operands' bytes
              grid_note);
}

// OnePassRowKernel (kRowOnePass): a thread for every U packs, 128-thread blocks, no loop; with
// kFlat FlatRowKernel, the same from the operands' bases (one row of dense operands).
template <typename S, int N, int U, bool kFlat, typename F>
void TimeOnePass(const std::string& name, const F& f, const Buffers& b, float copy_ms) {
  constexpr int V = static_cast<int>(16 / sizeof(S));
  const int64_t n = b.bytes / static_cast<int64_t>(sizeof(S));
  const RowArgs<N + 1> a = DenseRow<S, N>(b, n);
  const int64_t per_block = int64_t{V} * U * 128;
  const dim3 grid(static_cast<unsigned>((n + per_block - 1) / per_block), 1);
  const auto kernel = kFlat ? FlatRowKernel<S, N, V, U, F> : OnePassRowKernel<S, N, V, U, F>;
  const float ms = MedianMs([&] { kernel<<<grid, 128>>>(f, a); });
  cudaFuncAttributes attr{};
  Check(cudaFuncGetAttributes(&attr, kernel), "cudaFuncGetAttributes");
  std::printf("%-22s V=%2d U=%d threads=128 registers=%3d  %.4f ms  %5.1f%% of copy %s\n",
              name.c_str(), V, U, attr.numRegs, ms, 100.0 * copy_ms * (N + 1) / 2 / ms,
              kFlat ? "flat" : "one pass");
}

template <typename S, int N, typename F>
void Run(const char* op, const char* type, const F& f, const Buffers& b, float lo, float hi,
         float copy_ms) {
  const std::string name = std::string(op) + " " + type;
  if (!Selected(name)) return;
  const int64_t n = b.bytes / static_cast<int64_t>(sizeof(S));
  for (int k = 0; k < N; ++k) {
    FillKernel<S><<<1024, 256>>>(reinterpret_cast<S*>(b.in[k]), n, lo, hi);
  }
  Check(cudaDeviceSynchronize(), "fill");
  for (int threads : {128, 256}) {
    TimeOne<S, N, 1>(name, f, b, threads, copy_ms);
    TimeOne<S, N, 2>(name, f, b, threads, copy_ms);
    TimeOne<S, N, 4>(name, f, b, threads, copy_ms);
    TimeOne<S, N, 8>(name, f, b, threads, copy_ms);
    if constexpr (sizeof(S) <= 2 && (Wordwise<F>::kTypes & DTypeBit(DTypeOf<S>())) == 0) {
      // Packs of 8 and 4 bytes: fewer elements a thread, for math that is long per element
      // (word ops take whole 16-byte words).
      TimeOne<S, N, 1, static_cast<int>(8 / sizeof(S))>(name, f, b, threads, copy_ms);
      TimeOne<S, N, 2, static_cast<int>(8 / sizeof(S))>(name, f, b, threads, copy_ms);
      TimeOne<S, N, 1, static_cast<int>(4 / sizeof(S))>(name, f, b, threads, copy_ms);
    }
  }
  if constexpr (IsFloating(DTypeOf<S>()) && !RowPacks<S, N, 16 / sizeof(S), F>::kWords) {
    TimeOnePass<S, N, 1, false>(name, f, b, copy_ms);
    TimeOnePass<S, N, 2, false>(name, f, b, copy_ms);
    TimeOnePass<S, N, 4, false>(name, f, b, copy_ms);
    TimeOnePass<S, N, 1, true>(name, f, b, copy_ms);
    TimeOnePass<S, N, 2, true>(name, f, b, copy_ms);
  }
  if (!g_waves) return;
  for (int waves : {4, 16, 32, 64}) {
    TimeOne<S, N, 1>(name, f, b, 128, copy_ms, waves);
    TimeOne<S, N, 2>(name, f, b, 128, copy_ms, waves);
    TimeOne<S, N, 4>(name, f, b, 128, copy_ms, waves);
  }
}

// where(cond, x, y): WhereRowKernel alone, values of S in b's inputs, a bool condition of
// its own, 1, 2 and 4 chunks a thread (the launch takes one).
template <typename S, int U>
void TimeWhere(const std::string& name, const Buffers& b, const char* cond, float copy_ms) {
  constexpr int V = 16 / sizeof(S);
  const int64_t n = b.bytes / static_cast<int64_t>(sizeof(S));
  RowArgs<4> a{};
  a.rows = 1;
  a.inner_rows = 1;
  a.cols = n;
  a.base[0] = b.out;
  a.base[1] = const_cast<char*>(cond);
  a.base[2] = b.in[0];
  a.base[3] = b.in[1];
  for (int k = 0; k < 4; ++k) {
    a.step[k] = k == 1 ? 1 : sizeof(S);
    a.dtype[k] = k == 1 ? DType::kBool : DTypeOf<S>();
    a.access[k] = Access::kVector;
  }
  const int64_t per_block = static_cast<int64_t>(V) * U * 128;
  const dim3 grid(static_cast<unsigned>((n + per_block - 1) / per_block), 1), block(128, 1);
  const float ms = MedianMs([&] { WhereRowKernel<S, V, U, kWholeChunks><<<grid, block>>>(a); });
  cudaFuncAttributes attr{};
  Check(cudaFuncGetAttributes(&attr, WhereRowKernel<S, V, U, kWholeChunks>),
        "cudaFuncGetAttributes");
  // Bytes moved: a bool and three S a element, against a copy's two S.
  std::printf("%-22s U=%d threads=128 registers=%3d  %.4f ms  %5.1f%% of copy\n", name.c_str(), U,
              attr.numRegs, ms, 100.0 * copy_ms * (1.0 + 3.0 * sizeof(S)) / (2.0 * sizeof(S)) / ms);
}

template <typename S>
void RunWhere(const char* type, const Buffers& b, char* cond, float copy_ms) {
  const std::string name = std::string("where ") + type;
  if (!Selected(name)) return;
  const int64_t n = b.bytes / static_cast<int64_t>(sizeof(S));
  FillKernel<uint8_t><<<1024, 256>>>(reinterpret_cast<uint8_t*>(cond), n, 0, 2);
  for (int k = 0; k < 2; ++k) {
    FillKernel<S><<<1024, 256>>>(reinterpret_cast<S*>(b.in[k]), n, -4, 4);
  }
  Check(cudaDeviceSynchronize(), "fill");
  TimeWhere<S, 1>(name, b, cond, copy_ms);
  TimeWhere<S, 2>(name, b, cond, copy_ms);
  TimeWhere<S, 4>(name, b, cond, copy_ms);
}

// x[:, :8189] + y over [8192, 8189] (x [8192, 8192], y and the output dense): every output
// row starts elsewhere against a 16-byte boundary, as in the matrix's rowslice group.
// PeeledRowKernel over packs a thread and block sizes; % of copy against a copy of the
// output's bytes, times 1.5 (three operands' bytes against a copy's two).
template <typename S, int U>
void TimePeeled(const std::string& name, const Buffers& b, int threads, float copy_ms) {
  constexpr int V = 16 / sizeof(S);
  const int64_t m = 8192, cols = m - 3;
  RowArgs<3> a{};
  a.rows = m;
  a.inner_rows = m;
  a.cols = cols;
  a.base[0] = b.out;
  a.base[1] = b.in[0];
  a.base[2] = b.in[1];
  a.row_stride[0] = cols * sizeof(S);
  a.row_stride[1] = m * sizeof(S);
  a.row_stride[2] = cols * sizeof(S);
  for (int k = 0; k < 3; ++k) {
    a.step[k] = sizeof(S);
    a.dtype[k] = DTypeOf<S>();
    a.access[k] = k == 1 ? Access::kVector : Access::kStrided;
  }
  const int64_t packs = cols / V;
  int tx = 1;
  while (tx < threads && tx < (packs + U - 1) / U) tx *= 2;
  const dim3 block(tx, threads / tx);
  const dim3 grid(static_cast<unsigned>((packs + int64_t{tx} * U - 1) / (int64_t{tx} * U)),
                  static_cast<unsigned>((m + block.y - 1) / block.y));
  const AddOp f{1.0};
  const float ms = MedianMs([&] { PeeledRowKernel<S, 2, V, U><<<grid, block>>>(f, a); });
  cudaFuncAttributes attr{};
  Check(cudaFuncGetAttributes(&attr, PeeledRowKernel<S, 2, V, U, AddOp>), "cudaFuncGetAttributes");
  std::printf("%-22s V=%2d U=%d threads=%3d registers=%3d  %.4f ms  %5.1f%% of copy\n",
              name.c_str(), V, U, threads, attr.numRegs, ms, 100.0 * copy_ms * 1.5 / ms);
}

template <typename S>
void RunPeeled(const char* type, const Buffers& b) {
  const std::string name = std::string("add_rows_unaligned ") + type;
  if (!Selected(name)) return;
  const int64_t m = 8192;
  for (int k = 0; k < 2; ++k) {
    FillKernel<S><<<1024, 256>>>(reinterpret_cast<S*>(b.in[k]), m * m, -50, 50);
  }
  const float copy_ms = MedianMs(
      [&] { cudaMemcpyAsync(b.out, b.in[1], m * (m - 3) * sizeof(S), cudaMemcpyDeviceToDevice); });
  for (int threads : {128, 256}) {
    TimePeeled<S, 1>(name, b, threads, copy_ms);
    TimePeeled<S, 2>(name, b, threads, copy_ms);
    TimePeeled<S, 4>(name, b, threads, copy_ms);
  }
}

int Main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--waves") == 0) {
      g_waves = true;
    } else {
      g_filter.push_back(argv[i]);
    }
  }
  const int64_t kBytes = int64_t{1} << 28;
  Buffers narrow, wide;
  for (Buffers* b : {&narrow, &wide}) {
    b->bytes = b == &narrow ? kBytes : 2 * kBytes;
    for (char*& p : b->in) Check(cudaMalloc(&p, b->bytes), "cudaMalloc");
    Check(cudaMalloc(&b->out, b->bytes), "cudaMalloc");
  }
  auto copy_ms = [](const Buffers& b) {
    return MedianMs([&] { cudaMemcpyAsync(b.out, b.in[0], b.bytes, cudaMemcpyDeviceToDevice); });
  };
  // 2^26 elements of every type: 2- and 1-byte types use the front of the narrow buffers.
  Buffers half = narrow, byte = narrow;
  half.bytes = kBytes / 2;
  byte.bytes = kBytes / 4;
  const float copy1 = copy_ms(byte), copy2 = copy_ms(half), copy4 = copy_ms(narrow),
              copy8 = copy_ms(wide);
  std::printf("copy of 64, 128, 256, 512 MiB: %.4f, %.4f, %.4f, %.4f ms\n", copy1, copy2, copy4,
              copy8);

#define TC_UNARY_ALL(Op, name, lo, hi)                     \
  Run<Half, 1>(name, "f16", Op, half, lo, hi, copy2);      \
  Run<BFloat16, 1>(name, "bf16", Op, half, lo, hi, copy2); \
  Run<float, 1>(name, "f32", Op, narrow, lo, hi, copy4);   \
  Run<double, 1>(name, "f64", Op, wide, lo, hi, copy8);
  TC_UNARY_ALL(SigmoidOp{}, "sigmoid", -4, 4)
  TC_UNARY_ALL(TanhOp{}, "tanh", -4, 4)
  TC_UNARY_ALL(ExpOp{}, "exp", -4, 4)
  TC_UNARY_ALL(Expm1Op{}, "expm1", -4, 4)
  TC_UNARY_ALL(LogOp{}, "log", 0.01f, 4)
  TC_UNARY_ALL(Log1pOp{}, "log1p", 0.01f, 4)
  TC_UNARY_ALL(ErfOp{}, "erf", -4, 4)
  TC_UNARY_ALL(SinOp{}, "sin", -4, 4)
  TC_UNARY_ALL(CosOp{}, "cos", -4, 4)
  Run<Half, 1>("sigmoid_narrow", "f16", NarrowMath<SigmoidOp, false>{}, half, -4, 4, copy2);
  Run<BFloat16, 1>("sigmoid_narrow", "bf16", NarrowMath<SigmoidOp, true>{}, half, -4, 4, copy2);
  Run<Half, 1>("silu_narrow", "f16", NarrowMath<SiluOp, false>{}, half, -4, 4, copy2);
  Run<BFloat16, 1>("silu_narrow", "bf16", NarrowMath<SiluOp, true>{}, half, -4, 4, copy2);
  using GeluErf = FixedForm<GeluOp, 0>;
  using GeluTanh = FixedForm<GeluOp, 1>;
  Run<Half, 1>("gelu_narrow", "f16", NarrowMath<GeluErf, false>{{{false}}}, half, -4, 4, copy2);
  Run<BFloat16, 1>("gelu_narrow", "bf16", NarrowMath<GeluErf, true>{{{false}}}, half, -4, 4, copy2);
  Run<Half, 1>("gelu_tanh_narrow", "f16", NarrowMath<GeluTanh, false>{{{true}}}, half, -4, 4,
               copy2);
  Run<BFloat16, 1>("gelu_tanh_narrow", "bf16", NarrowMath<GeluTanh, true>{{{true}}}, half, -4, 4,
                   copy2);
  Run<Half, 1>("sin_narrow", "f16", NarrowMath<SinOp, false>{}, half, -4, 4, copy2);
  Run<BFloat16, 1>("sin_narrow", "bf16", NarrowMath<SinOp, true>{}, half, -4, 4, copy2);
  TC_UNARY_ALL(SqrtOp{}, "sqrt", 0.01f, 4)
  TC_UNARY_ALL(SiluOp{}, "silu", -4, 4)
  // gelu in the kernels the engine builds for each of its forms (kForms).
  TC_UNARY_ALL((GeluErf{{false}}), "gelu", -4, 4)
  TC_UNARY_ALL((GeluTanh{{true}}), "gelu_tanh", -4, 4)
#undef TC_UNARY_ALL
  Run<float, 2>("add", "f32", AddOp{1.0}, narrow, 0, 100, copy4);
  Run<Half, 2>("add", "f16", AddOp{1.0}, half, 0, 100, copy2);
  Run<int8_t, 2>("add", "i8", AddOp{1.0}, byte, 0, 100, copy1);
  Run<int8_t, 2>("mul", "i8", MulOp{}, byte, 0, 100, copy1);
  Run<Half, 2>("remainder", "f16", RemainderOp{}, half, 0.5f, 2, copy2);
  Run<BFloat16, 2>("remainder", "bf16", RemainderOp{}, half, 0.5f, 2, copy2);
  Run<float, 2>("remainder", "f32", RemainderOp{}, narrow, 0.5f, 2, copy4);
  // The float32 math, and the narrow math the op's kernels use for 16-bit types.
  Run<Half, 2>("atan2", "f16", Atan2Op{}, half, -4, 4, copy2);
  Run<BFloat16, 2>("atan2", "bf16", Atan2Op{}, half, -4, 4, copy2);
  Run<Half, 2>("atan2_narrow", "f16", NarrowMath<Atan2Op, false>{}, half, -4, 4, copy2);
  Run<BFloat16, 2>("atan2_narrow", "bf16", NarrowMath<Atan2Op, true>{}, half, -4, 4, copy2);
  Run<float, 2>("atan2", "f32", Atan2Op{}, narrow, -4, 4, copy4);
  Run<double, 2>("atan2", "f64", Atan2Op{}, wide, -4, 4, copy8);
  Run<Half, 2>("pow", "f16", PowOp{}, half, 0.5f, 2, copy2);
  Run<float, 2>("pow", "f32", PowOp{}, narrow, 0.5f, 2, copy4);
  Run<double, 2>("pow", "f64", PowOp{}, wide, 0.5f, 2, copy8);
  Run<Half, 2>("pow_narrow", "f16", NarrowMath<PowOp, false>{}, half, 0.5f, 2, copy2);
  Run<BFloat16, 2>("pow_narrow", "bf16", NarrowMath<PowOp, true>{}, half, 0.5f, 2, copy2);
  // bool results (the % of copy counts the output as wide as an input).
  Run<float, 2>("logical_and", "f32", LogicalAndOp{}, narrow, -1, 1, copy4);
  Run<float, 1>("isnan", "f32", IsnanOp{}, narrow, -1, 1, copy4);
  Run<BFloat16, 2>("gt", "bf16", GtOp{}, half, -1, 1, copy2);
  Run<Half, 2>("div", "f16", DivOp{}, half, 0.5f, 2, copy2);
  Run<BFloat16, 2>("div", "bf16", DivOp{}, half, 0.5f, 2, copy2);
  Run<float, 1>("reciprocal", "f32", ReciprocalOp{}, narrow, 0.5f, 2, copy4);
  Run<uint8_t, 2>("add", "u8", AddOp{1.0}, byte, 0, 100, copy1);
  Run<int8_t, 1>("neg", "i8", NegOp{}, byte, -100, 100, copy1);
  // The matrix's quantized cases: scales 0.05, 0.1 -> 0.2, zero points 3, -2 (uint8: 2) -> 1.
  Run<int8_t, 2>("quantized_add", "i8", QAddOp{0.05f, 3, 0.1f, -2, 5, 1, -128, 127}, byte, -128,
                 128, copy1);
  Run<int8_t, 2>("quantized_mul", "i8", QMulOp{0.05f, 3, 0.1f, -2, 5, 1, -128, 127}, byte, -128,
                 128, copy1);
  Run<uint8_t, 2>("quantized_add", "u8", QAddOp{0.05f, 3, 0.1f, 2, 5, 1, 0, 255}, byte, 0, 256,
                  copy1);
  Run<bool, 1>("logical_not", "bool", LogicalNotOp{}, byte, 0, 2, copy1);
  RunPeeled<int8_t>("i8", narrow);
  RunPeeled<Half>("f16", narrow);
  char* cond = nullptr;
  Check(cudaMalloc(&cond, int64_t{1} << 26), "cudaMalloc");
  RunWhere<int8_t>("i8", byte, cond, copy1);
  RunWhere<Half>("f16", half, cond, copy2);
  RunWhere<float>("f32", narrow, cond, copy4);
  RunWhere<double>("f64", wide, cond, copy8);
  return 0;
}

}  // namespace
}  // namespace tc::cuda

int main(int argc, char** argv) { return tc::cuda::Main(argc, argv); }
