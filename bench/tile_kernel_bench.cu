// The CUDA tile kernels alone, on the permutations, transposed casts and mixed-dtype tiles
// of the GPU matrix: each layout planned as the engine plans it (PlanElementwise, the CUDA
// tile rule), then launched as the engine launches it ("engine") and in other tile shapes,
// beside a device copy of the same bytes. Each launch timed with events, the median of 30
// after 3 warm-up launches; every shape's output compared with the engine's, byte for byte.
//
//   tensorcompute-tile-kernel-bench           every layout below
//   tensorcompute-tile-kernel-bench perm7     the layouts whose name holds every word given
//   tensorcompute-tile-kernel-bench --plans   each layout's plan only (no GPU needed)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/event_timing.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/tile_kernel.cuh"
#include "kernels/ops/binary.h"
#include "kernels/ops/misc.h"
#include "kernels/planner.h"
#include "kernels/tensor_view.h"

namespace tc::cuda {
namespace {

using bench::Check;
using bench::MedianMs;

__global__ void FillBytes(unsigned char* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = (static_cast<uint32_t>(i) ^ seed) * 2654435761u;
    h ^= h >> 13;
    // Exponent bits kept away from NaN and infinity for every float width.
    p[i] = static_cast<unsigned char>(h & 0x3f);
  }
}

struct Layout {
  std::string name;
  const char* op;  // "add" or "cast"
  std::vector<TensorView> inputs;
  DType out = DType::kFloat32;
  DimVector out_strides;
};

TensorView View(DType t, DimVector shape, DimVector strides) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return TensorView{t, std::move(shape), std::move(strides), 0, nullptr, n * ItemSize(t)};
}

TensorView Dense(DType t, const DimVector& shape) {
  return View(t, shape, ContiguousStrides(shape));
}

TensorView Permuted(DType t, const DimVector& shape, const std::vector<int>& perm) {
  const DimVector c = ContiguousStrides(shape);
  DimVector s, st;
  for (int p : perm) {
    s.push_back(shape[static_cast<size_t>(p)]);
    st.push_back(c[static_cast<size_t>(p)]);
  }
  return View(t, s, st);
}

std::vector<Layout> Layouts() {
  const DType f32 = DType::kFloat32, bf16 = DType::kBFloat16, f16 = DType::kFloat16,
              f64 = DType::kFloat64;
  std::vector<Layout> l;
  struct P {
    const char* name;
    DimVector shape;
    std::vector<int> perm;
  };
  for (const P& p : {P{"perm4_3102", {32, 64, 128, 256}, {3, 1, 0, 2}},
                     P{"perm5_42031", {16, 16, 32, 32, 256}, {4, 2, 0, 3, 1}},
                     P{"perm6_531402", {8, 8, 16, 16, 16, 256}, {5, 3, 1, 4, 0, 2}},
                     P{"perm7_6420531", {8, 8, 8, 16, 16, 16, 32}, {6, 4, 2, 0, 5, 3, 1}},
                     P{"perm7_6420531_2e21", {4, 4, 4, 8, 8, 16, 32}, {6, 4, 2, 0, 5, 3, 1}}}) {
    const TensorView x = Permuted(f32, p.shape, p.perm);
    l.push_back({std::string("add_f32_") + p.name, "add", {Dense(f32, x.shape), x}, f32, {}});
  }
  // Permutations of 1- and 2-byte types (the word tiles).
  {
    const TensorView x = Permuted(f16, {32, 64, 128, 256}, {3, 1, 0, 2});
    l.push_back({"add_f16_perm4_3102", "add", {Dense(f16, x.shape), x}, f16, {}});
    const TensorView y = Permuted(DType::kInt8, {256, 512, 512}, {2, 0, 1});
    l.push_back({"add_i8_perm3_201", "add", {Dense(DType::kInt8, y.shape), y}, DType::kInt8, {}});
  }
  constexpr int64_t M = 8192;
  l.push_back({"add_bf16t_f32", "add", {View(bf16, {M, M}, {1, M}), Dense(f32, {M, M})}, f32, {}});
  for (const auto& [from, to] : std::vector<std::pair<DType, DType>>{{f32, bf16},
                                                                     {bf16, f32},
                                                                     {f32, f16},
                                                                     {f16, f32},
                                                                     {f32, f64},
                                                                     {DType::kInt32, f32},
                                                                     {f32, DType::kInt32}}) {
    l.push_back({absl::StrCat("cast_", DTypeName(from), "t_to_", DTypeName(to)),
                 "cast",
                 {View(from, {M, M}, {1, M})},
                 to,
                 {}});
    l.push_back({absl::StrCat("cast_", DTypeName(from), "_to_", DTypeName(to), "t"),
                 "cast",
                 {Dense(from, {M, M})},
                 to,
                 {1, M}});
  }
  return l;
}

// One tile shape of the kernel the plan names, launched on args made as the engine makes
// them.
template <typename S, int N, int T0, int T1, bool kSame, bool kFused, typename F>
void LaunchShape(const F& f, const TileArgs<N + 1>& ta, int staged) {
  const absl::Status st = LaunchTileShape<S, N, T0, T1, kSame, kFused>(f, ta, staged, nullptr);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
    std::exit(1);
  }
}

template <typename S, int N, int kW1, int kMinBlocks, typename F>
void LaunchWordShape(const F& f, const TileArgs<N + 1>& ta, int staged) {
  if (!LaunchWordTileShape<S, N, kW1, kMinBlocks>(f, ta, staged, nullptr).ok()) std::exit(1);
}

struct Shape {
  std::string name;
  std::function<void()> launch;
};

// Whether a block's staged tiles of that shape fit the 48 KiB of shared memory a launch may
// take without opting in to more.
template <typename S, int T0, int T1>
bool Fits(int staged) {
  return static_cast<size_t>(staged) * T0 * (T1 + TilePad<S, T0>()) * sizeof(S) <= 48 * 1024;
}

template <typename S, int N, typename F>
std::vector<Shape> Shapes(const F& f, const Plan& plan, const TileArgs<N + 1>& ta, bool same) {
  std::vector<Shape> v;
  const int staged = plan.num_staged;
  if constexpr (sizeof(S) <= 2) {
    if (same && plan.fused[0] < 0) {
      const std::string w = absl::StrCat("words ", 128 / sizeof(S), "x");
      v.push_back({w + std::to_string(128 / sizeof(S)) + " min4",
                   [=] { LaunchWordShape<S, N, 1, 4>(f, ta, staged); }});
      v.push_back({w + std::to_string(256 / sizeof(S)) + " min4",
                   [=] { LaunchWordShape<S, N, 2, 4>(f, ta, staged); }});
      v.push_back({w + std::to_string(256 / sizeof(S)) + " min6",
                   [=] { LaunchWordShape<S, N, 2, 6>(f, ta, staged); }});
    }
  }
  if (plan.fused[0] >= 0) {
    v.push_back({"fused 16x256", [=] { LaunchShape<S, N, 16, 256, true, true>(f, ta, staged); }});
    v.push_back({"fused 32x128", [=] { LaunchShape<S, N, 32, 128, true, true>(f, ta, staged); }});
    v.push_back({"fused 64x64", [=] { LaunchShape<S, N, 64, 64, true, true>(f, ta, staged); }});
    v.push_back({"fused 128x32", [=] { LaunchShape<S, N, 128, 32, true, true>(f, ta, staged); }});
  } else if (same) {
    v.push_back({"16x256", [=] { LaunchShape<S, N, 16, 256, true, false>(f, ta, staged); }});
    v.push_back({"32x128", [=] { LaunchShape<S, N, 32, 128, true, false>(f, ta, staged); }});
    v.push_back({"64x64", [=] { LaunchShape<S, N, 64, 64, true, false>(f, ta, staged); }});
  } else {
    const std::string t = std::string(" S=") + std::string(DTypeName(DTypeOf<S>()));
    v.push_back(
        {"converting 32x32" + t, [=] { LaunchShape<S, N, 32, 32, false, false>(f, ta, staged); }});
    v.push_back(
        {"converting 32x64" + t, [=] { LaunchShape<S, N, 32, 64, false, false>(f, ta, staged); }});
    v.push_back(
        {"converting 64x64" + t, [=] { LaunchShape<S, N, 64, 64, false, false>(f, ta, staged); }});
    if (Fits<S, 64, 128>(staged)) {
      v.push_back({"converting 64x128" + t,
                   [=] { LaunchShape<S, N, 64, 128, false, false>(f, ta, staged); }});
    }
  }
  return v;
}

void Run(const Layout& l, int sms, bool plans_only) {
  const bool cast = std::strcmp(l.op, "cast") == 0;
  // Casts compute in the wider of the two types, as the engine has it; adds in the output's.
  const DType compute =
      !cast || ItemSize(l.out) > ItemSize(l.inputs[0].dtype) ? l.out : l.inputs[0].dtype;
  const DType other = cast ? (compute == l.out ? l.inputs[0].dtype : l.out) : compute;
  auto plan = PlanElementwise(l.inputs, compute, l.out, l.out_strides, false, TileRule::kDense,
                              /*converting_tiles=*/true);
  if (!plan.ok() || plan->kernel != Kernel::kTiles) {
    std::printf("%-28s not planned for tiles\n", l.name.c_str());
    return;
  }
  std::printf("%-28s %s, %d staged, fused %d %d, sizes", l.name.c_str(),
              std::string(KernelName(plan->kernel)).c_str(), plan->num_staged, plan->fused[0],
              plan->fused[1]);
  for (int d = 0; d < plan->ndim; ++d) std::printf(" %lld", static_cast<long long>(plan->sizes[d]));
  std::printf("\n");
  if (plans_only) return;
  // Buffers: each input's storage, the output's.
  std::vector<char*> bufs;
  int64_t moved = plan->out_storage_bytes;
  char* out = nullptr;
  Check(cudaMalloc(&out, static_cast<size_t>(plan->out_storage_bytes)), "cudaMalloc");
  for (const TensorView& v : l.inputs) {
    char* p = nullptr;
    Check(cudaMalloc(&p, static_cast<size_t>(v.storage_bytes)), "cudaMalloc");
    FillBytes<<<1024, 256>>>(reinterpret_cast<unsigned char*>(p), v.storage_bytes, 77);
    bufs.push_back(p);
    moved += v.storage_bytes;
  }
  char* base[kMaxOperands] = {out};
  for (size_t i = 0; i < bufs.size(); ++i) base[i + 1] = bufs[i] + plan->offsets[i + 1];
  char *copy_in = nullptr, *copy_out = nullptr;
  Check(cudaMalloc(&copy_in, static_cast<size_t>(moved / 2)), "cudaMalloc");
  Check(cudaMalloc(&copy_out, static_cast<size_t>(moved / 2)), "cudaMalloc");
  const float copy_ms =
      MedianMs([&] { cudaMemcpyAsync(copy_out, copy_in, moved / 2, cudaMemcpyDeviceToDevice); });
  LaunchEnv env{sms, nullptr, nullptr, nullptr};
  std::vector<Shape> shapes;
  const auto add = [&](auto s_tag, auto f, auto n_tag, bool engine) {
    using S = typename decltype(s_tag)::type;
    constexpr int N = decltype(n_tag)::value;
    TileArgs<N + 1> ta;
    if (!MakeTileArgs(*plan, base, &ta).ok()) std::exit(1);
    bool same = plan->dtypes[0] == DTypeOf<S>();
    for (int k = 1; k <= N; ++k) same = same && plan->dtypes[k] == DTypeOf<S>();
    if (engine) {
      shapes.push_back({"engine", [=, &plan] {
                          if (!LaunchTiles<S, N>(f, *plan, base, env, same).ok()) std::exit(1);
                        }});
    }
    for (Shape& s : Shapes<S, N>(f, *plan, ta, same)) shapes.push_back(std::move(s));
  };
  const auto add_cast = [&](DType t, bool engine) {
    const auto one = std::integral_constant<int, 1>{};
    switch (t) {
      case DType::kFloat32:
        return add(TypeTag<float>{}, CastOp{}, one, engine), true;
      case DType::kBFloat16:
        return add(TypeTag<BFloat16>{}, CastOp{}, one, engine), true;
      case DType::kFloat16:
        return add(TypeTag<Half>{}, CastOp{}, one, engine), true;
      case DType::kFloat64:
        return add(TypeTag<double>{}, CastOp{}, one, engine), true;
      case DType::kInt32:
        return add(TypeTag<int32_t>{}, CastOp{}, one, engine), true;
      default:
        return false;
    }
  };
  if (!cast) {
    const auto two = std::integral_constant<int, 2>{};
    if (l.out == DType::kFloat16) {
      add(TypeTag<Half>{}, AddOp{}, two, true);
    } else if (l.out == DType::kInt8) {
      add(TypeTag<int8_t>{}, AddOp{}, two, true);
    } else {
      add(TypeTag<float>{}, AddOp{}, two, true);
    }
  } else if (!add_cast(compute, true) || (other != compute && !add_cast(other, false))) {
    std::printf("%-28s no kernel here for its types\n", l.name.c_str());
    return;
  }
  const size_t out_bytes = static_cast<size_t>(plan->out_storage_bytes);
  std::vector<char> want(out_bytes), got(out_bytes);
  std::printf("  %-20s %.4f ms\n", "copy", copy_ms);
  for (size_t i = 0; i < shapes.size(); ++i) {
    Check(cudaMemset(out, 0, out_bytes), "cudaMemset");
    shapes[i].launch();
    Check(cudaDeviceSynchronize(), shapes[i].name.c_str());
    Check(cudaMemcpy(i == 0 ? want.data() : got.data(), out, out_bytes, cudaMemcpyDeviceToHost),
          "cudaMemcpy");
    const bool same = i == 0 || std::memcmp(want.data(), got.data(), out_bytes) == 0;
    const float ms = MedianMs(shapes[i].launch);
    std::printf("  %-20s %.4f ms  %5.1f%% of copy%s\n", shapes[i].name.c_str(), ms,
                100 * copy_ms / ms, same ? "" : "  DIFFERS from the engine's");
  }
  cudaFree(out);
  cudaFree(copy_in);
  cudaFree(copy_out);
  for (char* p : bufs) cudaFree(p);
}

}  // namespace
}  // namespace tc::cuda

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int sms = 0;
  const bool plans_only = argc > 1 && std::strcmp(argv[1], "--plans") == 0;
  if (!plans_only) {
    tc::cuda::Check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  }
  for (const tc::cuda::Layout& l : tc::cuda::Layouts()) {
    bool match = true;
    for (int i = plans_only ? 2 : 1; i < argc; ++i) {
      match = match && l.name.find(argv[i]) != std::string::npos;
    }
    if (match) tc::cuda::Run(l, sms, plans_only);
  }
  return 0;
}
