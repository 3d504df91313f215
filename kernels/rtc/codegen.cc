#include "kernels/rtc/codegen.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/gpu/general_args.h"
#include "kernels/rtc/functors.h"

namespace tc::rtc {
namespace {

using expr::Node;
using expr::NodeKind;
using expr::Program;

constexpr int kThreads = 256;

const char* TypeName(DType t) {
  switch (t) {
    case DType::kBool:
      return "bool";
    case DType::kUInt8:
      return "uint8_t";
    case DType::kInt8:
      return "int8_t";
    case DType::kInt16:
      return "int16_t";
    case DType::kInt32:
      return "int32_t";
    case DType::kInt64:
      return "int64_t";
    case DType::kFloat16:
      return "tc::Half";
    case DType::kBFloat16:
      return "tc::BFloat16";
    case DType::kFloat32:
      return "float";
    case DType::kFloat64:
      return "double";
  }
  return "void";
}

int NumInputs(const Program& p) { return static_cast<int>(p.input_dtypes.size()); }

DType OperandType(const Program& p, int k) {
  return k == 0 ? p.out_dtype : p.input_dtypes[static_cast<size_t>(k - 1)];
}

// The stored type of node i's value: the output's at the root.
DType ValueType(const Program& p, int i) {
  return i == p.expression.root() ? p.out_dtype : p.types[static_cast<size_t>(i)].dtype;
}

// A literal's type as the kernel holds it: a zero-dimensional tensor's own (converted by the
// call like any operand), a number the type its call computes it in.
DType LiteralType(const Node& call, const expr::NodeType& t, int arg, const Node& literal) {
  return literal.zero_dim ? *literal.zero_dim : expr::LiteralTarget(call, t, arg);
}

std::string Inputs(int inputs, const std::string& prefix, const std::string& suffix) {
  std::string s;
  for (int k = 1; k <= inputs; ++k) absl::StrAppend(&s, k > 1 ? ", " : "", prefix, k, suffix);
  return s;
}

// The type list of AnyOf for the program's operands: operand k's type for k = 0 (the
// output), 1, ...
std::string OperandTypes(const Program& p) {
  std::string list;
  for (int k = 0; k <= NumInputs(p); ++k) {
    absl::StrAppend(&list, k > 0 ? ", " : "", TypeName(OperandType(p, k)));
  }
  return list;
}

// A struct holding every literal and functor, whose call operator evaluates the tree over one
// element of each input. `carried`: the walk holds operands as Operand (tc::cuda::AnyOf of
// their types), which the call operator takes and returns; otherwise each in its own type.
void AppendEvaluator(const Program& p, bool carried, std::string* s) {
  const expr::Expression& e = p.expression;
  std::string members, body;
  int literals = 0;
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const Node& n = e.nodes[i];
    if (n.kind != NodeKind::kCall) continue;
    const expr::NodeType& t = p.types[i];
    std::string call = absl::StrCat("tc::rtc::Apply<", TypeName(t.compute), ", ",
                                    TypeName(ValueType(p, static_cast<int>(i))), ">(z, f", i);
    for (size_t k = 0; k < n.args.size(); ++k) {
      const Node& a = e.at(n.args[k]);
      switch (a.kind) {
        case NodeKind::kInput:
          absl::StrAppend(&call, ", x", a.input + 1);
          break;
        case NodeKind::kLiteral:
          absl::StrAppend(&members, "  ", TypeName(LiteralType(n, t, static_cast<int>(k), a)), " l",
                          literals, ";\n");
          absl::StrAppend(&call, ", l", literals++);
          break;
        case NodeKind::kCall:
          absl::StrAppend(&call, ", v", n.args[k]);
          break;
      }
    }
    absl::StrAppend(&body, "    const ", TypeName(ValueType(p, static_cast<int>(i))), " v", i,
                    " = ", call, ");\n");
  }
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const Node& n = e.nodes[i];
    if (n.kind == NodeKind::kCall)
      absl::StrAppend(&members, "  ", Functor(n.op->index).type, " f", i, ";\n");
  }
  if (carried) absl::StrAppend(s, "using Operand = tc::cuda::AnyOf<", OperandTypes(p), ">;\n\n");
  absl::StrAppend(s, "struct Evaluator {\n  unsigned z;\n", members,
                  "  __device__ __forceinline__ ", carried ? "Operand" : TypeName(p.out_dtype),
                  " operator()(");
  std::string unpack;
  for (int k = 1; k <= NumInputs(p); ++k) {
    const char* t = TypeName(OperandType(p, k));
    if (carried) {
      absl::StrAppend(s, k > 1 ? ", " : "", "Operand r", k);
      absl::StrAppend(&unpack, "    const ", t, " x", k, " = r", k, ".As<", t, ">();\n");
    } else {
      absl::StrAppend(s, k > 1 ? ", " : "", t, " x", k);
    }
  }
  absl::StrAppend(
      s, ") const {\n", unpack, body, "    return ",
      carried ? absl::StrCat("Operand::Holding(v", e.root(), ")") : absl::StrCat("v", e.root()),
      ";\n  }\n};\n\n");
}

// The kernel's parameters, as the ahead-of-time kernels take a functor and their walk's
// arguments: the evaluator (its literals and functors as one parameter, laid out as
// EvaluatorParam lays it out), then the walk's arguments.
std::string Parameters(const std::string& walk_args) {
  return absl::StrCat("const Evaluator e, const ", walk_args, " a");
}

void AppendRowsKernel(const Program& p, const ExprWalk& w, std::string* s) {
  const int nops = NumInputs(p) + 1;
  const std::string params = Parameters(absl::StrCat("tc::rtc::RowArgs<", nops, ">"));
  const int V = w.vector, U = w.unroll;
  absl::StrAppend(s, "extern \"C\" __global__ void __launch_bounds__(", kThreads, ") tc_expr(",
                  params, ") {\n");
  absl::StrAppend(
      s, "  constexpr int V = ", V, ", U = ", U, ";\n",
      "  const long long packs = (a.cols + V - 1) / V, full = a.cols / V;\n",
      "  const long long tile = static_cast<long long>(blockDim.x) * U;\n",
      "  for (long long r = blockIdx.y * static_cast<long long>(blockDim.y) + threadIdx.y;"
      " r < a.rows; r += static_cast<long long>(gridDim.y) * blockDim.y) {\n");
  for (int k = 0; k < nops; ++k) {
    absl::StrAppend(s, "    ", k == 0 ? "" : "const ", "char* row", k, " = a.base[", k,
                    "] + r * a.row_stride[", k, "];\n");
  }
  absl::StrAppend(s,
                  "    for (long long p0 = blockIdx.x * tile + threadIdx.x; p0 < packs;"
                  " p0 += gridDim.x * tile) {\n");
  if (V == 1) {
    // Every load of the step first, then the evaluations.
    for (int k = 1; k < nops; ++k) {
      absl::StrAppend(s, "      ", TypeName(OperandType(p, k)), " x", k, "[U];\n");
    }
    absl::StrAppend(s, "#pragma unroll\n      for (int u = 0; u < U; ++u) {\n",
                    "        const long long c = p0 + u * static_cast<long long>(blockDim.x);\n",
                    "        if (c < a.cols) {\n");
    for (int k = 1; k < nops; ++k) {
      absl::StrAppend(s, "          x", k, "[u] = *reinterpret_cast<const ",
                      TypeName(OperandType(p, k)), "*>(row", k, " + c * a.step[", k, "]);\n");
    }
    absl::StrAppend(s, "        }\n      }\n#pragma unroll\n      for (int u = 0; u < U; ++u) {\n",
                    "        const long long c = p0 + u * static_cast<long long>(blockDim.x);\n",
                    "        if (c < a.cols) *reinterpret_cast<", TypeName(p.out_dtype),
                    "*>(row0 + c * a.step[0]) = e(", Inputs(nops - 1, "x", "[u]"), ");\n",
                    "      }\n");
  } else {
    // Repeated operands (step 0) are one value for the row; dense ones come in packs.
    std::string args, ones;
    for (int k = 1; k < nops; ++k) {
      const char* t = TypeName(OperandType(p, k));
      if (p.space.strides[k][0] == 0) {
        absl::StrAppend(&ones, "    const ", t, " one", k, " = *reinterpret_cast<const ", t,
                        "*>(row", k, ");\n");
        absl::StrAppend(&args, k > 1 ? ", " : "", "one", k);
      } else {
        absl::StrAppend(s, "      tc::cuda::Pack<", t, ", V> x", k, "[U];\n");
        absl::StrAppend(&args, k > 1 ? ", " : "", "x", k, "[u].v[j]");
      }
    }
    s->insert(s->rfind("    for (long long p0"), ones);
    // A row's last, partial pack is loaded element by element, its missing elements copies
    // of the row's last one (so they raise nothing the real ones do not), and evaluated by
    // the same code as the full packs: the tree is compiled V * U times, not once more.
    absl::StrAppend(s, "#pragma unroll\n      for (int u = 0; u < U; ++u) {\n",
                    "        const long long q = p0 + u * static_cast<long long>(blockDim.x);\n",
                    "        if (q < full) {\n");
    std::string partial;
    for (int k = 1; k < nops; ++k) {
      if (p.space.strides[k][0] == 0) continue;
      const char* t = TypeName(OperandType(p, k));
      absl::StrAppend(s, "          x", k, "[u] = reinterpret_cast<const tc::cuda::Pack<", t,
                      ", V>*>(row", k, ")[q];\n");
      absl::StrAppend(&partial, "            x", k, "[u].v[j] = *reinterpret_cast<const ", t,
                      "*>(row", k, " + c * a.step[", k, "]);\n");
    }
    absl::StrAppend(s, "        } else if (q < packs) {\n#pragma unroll\n",
                    "          for (int j = 0; j < V; ++j) {\n",
                    "            const long long c = min(q * V + j, a.cols - 1);\n", partial,
                    "          }\n        }\n      }\n");
    const char* out = TypeName(p.out_dtype);
    absl::StrAppend(s, "#pragma unroll\n      for (int u = 0; u < U; ++u) {\n",
                    "        const long long q = p0 + u * static_cast<long long>(blockDim.x);\n",
                    "        if (q < packs) {\n", "          tc::cuda::Pack<", out, ", V> y;\n",
                    "#pragma unroll\n          for (int j = 0; j < V; ++j) y.v[j] = e(", args,
                    ");\n", "          if (q < full) {\n",
                    "            reinterpret_cast<tc::cuda::Pack<", out, ", V>*>(row0)[q] = y;\n",
                    "          } else {\n#pragma unroll\n",
                    "            for (int j = 0; j < V; ++j) {\n",
                    "              if (q * V + j < a.cols) *reinterpret_cast<", out,
                    "*>(row0 + (q * V + j) * a.step[0]) = y.v[j];\n",
                    "            }\n          }\n        }\n      }\n");
  }
  absl::StrAppend(s, "    }\n  }\n}\n");
}

// Any rank and strides: the ahead-of-time ops' general walk (kernels/cuda/general_kernel.cuh),
// its operands held as Operand, over a piece of the space that fits 32-bit index math.
void AppendGeneralKernel(const Program& p, const ExprWalk& w, std::string* s) {
  const int nops = NumInputs(p) + 1;
  absl::StrAppend(s, "extern \"C\" __global__ void __launch_bounds__(tc::cuda::kGeneralThreads) ",
                  "tc_expr(", Parameters(absl::StrCat("tc::cuda::KernelArgs<", nops, ">")),
                  ") {\n  tc::cuda::GeneralSteps<Operand, ", nops - 1, ", false, Evaluator, ",
                  w.unroll, ">(e, a);\n}\n");
}

// Blocks of 32 x 8 threads; a tile is 32 elements along dim 0 by T1 = 8 * U along dim 1.
void AppendTilesKernel(const Program& p, const ExprWalk& w, std::string* s) {
  const int nops = NumInputs(p) + 1, nd = std::max(1, p.space.ndim);
  const int U = w.unroll, T1 = 8 * U;
  const std::string params = Parameters(absl::StrCat("tc::rtc::StridedArgs<", nops, ", ", nd, ">"));
  absl::StrAppend(s, "extern \"C\" __global__ void __launch_bounds__(", kThreads, ") tc_expr(",
                  params, ") {\n");
  // One shared tile per staged input, an element of padding a row keeping reads down a
  // column on distinct banks.
  for (int k = 1; k < nops; ++k) {
    if (p.walk.staged[k] < 0) continue;
    absl::StrAppend(s, "  __shared__ ", TypeName(OperandType(p, k)), " t", k, "[32][", T1 + 1,
                    "];\n");
  }
  absl::StrAppend(
      s, "  constexpr int U = ", U, ", T1 = ", T1, ", H = T1 / 32;\n",
      "  const long long n0 = a.size[0], n1 = a.size[1];\n",
      "  const long long tiles0 = (n0 + 31) / 32, tiles = tiles0 * ((n1 + T1 - 1) / T1);\n",
      "  const long long count = tiles * ", nd == 3 ? "a.size[2]" : "1", ";\n",
      "  const int x = threadIdx.x, y = threadIdx.y;\n",
      "  for (long long t = blockIdx.x; t < count; t += gridDim.x) {\n",
      "    const long long batch = t / tiles, r = t - batch * tiles;\n",
      "    const long long c0 = (r % tiles0) * 32, c1 = (r / tiles0) * T1;\n");
  for (int k = 0; k < nops; ++k) {
    absl::StrAppend(s, "    ", k == 0 ? "" : "const ", "char* p", k, " = a.base[", k, "]",
                    nd == 3 ? absl::StrCat(" + batch * a.stride[", k, "][2]") : "", ";\n");
  }
  // Every load of the tile first: the staged inputs along dim 1 (a warp reads 32 consecutive
  // elements; 4 rows of dim 0 by H pieces of 32 per thread), the others along dim 0 (U
  // elements per thread); then the staged ones into shared memory, one barrier, evaluation.
  std::string staged_loads, stores, direct_loads, args;
  for (int k = 1; k < nops; ++k) {
    const char* t = TypeName(OperandType(p, k));
    absl::StrAppend(&args, k > 1 ? ", " : "");
    if (p.walk.staged[k] >= 0) {
      absl::StrAppend(s, "    ", t, " s", k, "[4 * H];\n");
      absl::StrAppend(&staged_loads, "          s", k, "[v * H + h] = *reinterpret_cast<const ", t,
                      "*>(p", k, " + i0 * a.stride[", k, "][0] + i1 * a.stride[", k, "][1]);\n");
      absl::StrAppend(&stores, "        t", k, "[y + 8 * v][x + 32 * h] = s", k, "[v * H + h];\n");
      absl::StrAppend(&args, "t", k, "[x][y + 8 * u]");
    } else {
      absl::StrAppend(s, "    ", t, " x", k, "[U];\n");
      absl::StrAppend(&direct_loads, "        x", k, "[u] = *reinterpret_cast<const ", t, "*>(p", k,
                      " + i0 * a.stride[", k, "][0] + i1 * a.stride[", k, "][1]);\n");
      absl::StrAppend(&args, "x", k, "[u]");
    }
  }
  absl::StrAppend(s, "#pragma unroll\n    for (int v = 0; v < 4; ++v) {\n",
                  "#pragma unroll\n      for (int h = 0; h < H; ++h) {\n",
                  "        const long long i0 = c0 + y + 8 * v, i1 = c1 + x + 32 * h;\n",
                  "        if (i0 < n0 && i1 < n1) {\n", staged_loads,
                  "        }\n      }\n    }\n");
  absl::StrAppend(s, "#pragma unroll\n    for (int u = 0; u < U; ++u) {\n",
                  "      const long long i0 = c0 + x, i1 = c1 + y + 8 * u;\n",
                  "      if (i0 < n0 && i1 < n1) {\n", direct_loads, "      }\n    }\n");
  if (!stores.empty()) {
    absl::StrAppend(s, "#pragma unroll\n    for (int v = 0; v < 4; ++v) {\n",
                    "#pragma unroll\n      for (int h = 0; h < H; ++h) {\n", stores,
                    "      }\n    }\n");
  }
  absl::StrAppend(s, "    __syncthreads();\n",
                  "#pragma unroll\n    for (int u = 0; u < U; ++u) {\n",
                  "      const long long i0 = c0 + x, i1 = c1 + y + 8 * u;\n",
                  "      if (i0 < n0 && i1 < n1) {\n", "        *reinterpret_cast<",
                  TypeName(p.out_dtype), "*>(p0 + i0 * a.stride[0][0] + i1 * a.stride[0][1]) = e(",
                  args, ");\n      }\n    }\n    __syncthreads();\n  }\n}\n");
}

void Put(std::string* s, const void* p, size_t n) { s->append(static_cast<const char*>(p), n); }
void Put64(std::string* s, int64_t v) { Put(s, &v, sizeof(v)); }

// The general walk's arguments (cuda::KernelArgs<nops>) for a piece, as bytes.
template <int kOps>
std::string GeneralArgs(int nops, int ndim, const IndexPiece& piece, const int64_t* strides,
                        const DType* dtypes, char* const* base) {
  if constexpr (kOps > kMaxIterOperands) {
    std::abort();  // (a program has at most kMaxIterOperands operands)
  } else {
    if (nops != kOps) return GeneralArgs<kOps + 1>(nops, ndim, piece, strides, dtypes, base);
    const cuda::KernelArgs<kOps> a =
        cuda::MakeKernelArgs<kOps>(ndim, piece.sizes, piece.numel, strides, kMaxRank, dtypes, base);
    std::string bytes(sizeof(a), '\0');
    std::memcpy(bytes.data(), &a, sizeof(a));
    return bytes;
  }
}

}  // namespace

std::string GenerateSource(const Program& p, int vector) {
  ExprWalk w = p.walk;
  w.vector = vector;
  const bool general = w.kernel == Kernel::kGeneral;
  std::string s = "#include \"kernels/rtc/prelude.cuh\"\n";
  if (general) s += "#include \"kernels/cuda/general_kernel.cuh\"\n";
  s += "\n";
  AppendEvaluator(p, general, &s);
  // The host lays the evaluator's bytes out itself (EvaluatorParam): the compiler checks that
  // it agrees.
  absl::StrAppend(&s, "static_assert(sizeof(Evaluator) == ", EvaluatorParam(p, nullptr).size(),
                  ", \"the host's layout of the evaluator\");\n");
  s += "\n";
  if (w.kernel == Kernel::kRows) {
    AppendRowsKernel(p, w, &s);
  } else if (w.kernel == Kernel::kTiles) {
    AppendTilesKernel(p, w, &s);
  } else {
    AppendGeneralKernel(p, w, &s);
  }
  return s;
}

std::string EvaluatorParam(const Program& p, int* error) {
  const expr::Expression& e = p.expression;
  // The members in order, each at the next multiple of its alignment (every member's type
  // is standard layout on both sides, so host and device agree on this).
  std::string bytes;
  size_t widest = alignof(unsigned);
  auto put = [&](const void* data, size_t size, size_t align) {
    bytes.resize((bytes.size() + align - 1) / align * align, '\0');
    bytes.append(static_cast<const char*>(data), size);
    widest = std::max(widest, align);
  };
  const unsigned zero = 0;
  put(&zero, sizeof(zero), alignof(unsigned));
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const Node& n = e.nodes[i];
    if (n.kind != NodeKind::kCall) continue;
    for (size_t k = 0; k < n.args.size(); ++k) {
      const Node& a = e.at(n.args[k]);
      if (a.kind != NodeKind::kLiteral) continue;
      const DType target = LiteralType(n, p.types[i], static_cast<int>(k), a);
      const uint64_t v = expr::LiteralBits(a, target);
      put(&v, static_cast<size_t>(ItemSize(target)), static_cast<size_t>(ItemSize(target)));
    }
  }
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const Node& n = e.nodes[i];
    if (n.kind != NodeKind::kCall) continue;
    const FunctorInfo& f = Functor(n.op->index);
    alignas(16) char made[256];
    f.make(p.types[i].attrs, p.types[i].result, error, made);
    put(made, f.size, f.align);
  }
  bytes.resize((bytes.size() + widest - 1) / widest * widest, '\0');
  return bytes;
}

std::string RaisingOps(const Program& p) {
  std::vector<std::string> names;
  for (const Node& n : p.expression.nodes) {
    if (n.kind != NodeKind::kCall || !Functor(n.op->index).raises) continue;
    if (std::find(names.begin(), names.end(), n.op->spec.name) == names.end()) {
      names.push_back(n.op->spec.name);
    }
  }
  return absl::StrJoin(names, "' or '");
}

std::vector<WalkPart> Walk(const Program& p, int vector, char* const* base, int multiprocessors) {
  ExprWalk w = p.walk;
  w.vector = vector;
  const Iteration& it = p.space;
  const int nops = it.num_operands;
  std::vector<WalkPart> parts;
  if (w.kernel == Kernel::kGeneral) {
    int64_t item[kMaxIterOperands];
    DType dtypes[kMaxIterOperands];
    for (int k = 0; k < nops; ++k) {
      dtypes[k] = OperandType(p, k);
      item[k] = ItemSize(dtypes[k]);
    }
    for (const IndexPiece& piece : SplitForIndexing(it, it.numel, item)) {
      WalkPart part;
      part.geometry.grid[0] = cuda::GeneralBlocks(piece.numel, multiprocessors, w.unroll);
      part.geometry.block[0] = cuda::kGeneralThreads;
      if (part.geometry.grid[0] == 0) continue;
      char* at[kMaxIterOperands];
      for (int k = 0; k < nops; ++k) at[k] = base[k] + piece.offsets[k];
      part.args = GeneralArgs<1>(nops, it.ndim, piece, &it.strides[0][0], dtypes, at);
      parts.push_back(std::move(part));
    }
    return parts;
  }
  WalkPart part;
  std::string& s = part.args;
  Geometry* g = &part.geometry;
  if (w.kernel == Kernel::kRows) {
    const int64_t cols = it.sizes[0], rows = it.ndim == 2 ? it.sizes[1] : 1;
    Put64(&s, rows);
    Put64(&s, cols);
    for (int k = 0; k < nops; ++k) Put(&s, &base[k], sizeof(char*));
    for (int k = 0; k < nops; ++k) Put64(&s, it.ndim == 2 ? it.strides[k][1] : 0);
    for (int k = 0; k < nops; ++k) Put64(&s, it.strides[k][0]);
    // Threads along a row for its packs, a power of two up to 256, the rest of the block's
    // 256 threads on neighbouring rows.
    const int64_t packs = (cols + w.vector - 1) / w.vector;
    const int64_t threads_per_row = (packs + w.unroll - 1) / w.unroll;
    int tx = 1;
    while (tx < kThreads && tx < threads_per_row) tx *= 2;
    const int ty = kThreads / tx;
    g->block[0] = static_cast<unsigned>(tx);
    g->block[1] = static_cast<unsigned>(ty);
    g->grid[0] = static_cast<unsigned>(
        std::max<int64_t>(1, std::min<int64_t>((threads_per_row + tx - 1) / tx, INT32_MAX)));
    g->grid[1] =
        static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((rows + ty - 1) / ty, 65535)));
    parts.push_back(std::move(part));
    return parts;
  }
  const int nd = std::max(1, it.ndim);
  for (int d = 0; d < nd; ++d) Put64(&s, it.sizes[d]);
  for (int k = 0; k < nops; ++k) {
    for (int d = 0; d < nd; ++d) Put64(&s, it.strides[k][d]);
  }
  for (int k = 0; k < nops; ++k) Put(&s, &base[k], sizeof(char*));
  // Tiles: 32 x 8 threads a block, blocks looping over the tiles.
  const int64_t t1 = 8 * w.unroll;
  const int64_t tiles =
      (it.sizes[0] + 31) / 32 * ((it.sizes[1] + t1 - 1) / t1) * (nd == 3 ? it.sizes[2] : 1);
  g->block[0] = 32;
  g->block[1] = kThreads / 32;
  g->grid[0] = static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>(tiles, int64_t{multiprocessors} * 16)));
  parts.push_back(std::move(part));
  return parts;
}

}  // namespace tc::rtc
