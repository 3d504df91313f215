// CPU loops over a Plan: rows of the fastest-moving dim, split across the thread pool, with
// inner loops the compiler vectorizes when every operand is dense or a repeated scalar.
#pragma once

#include <cstdint>
#include <cstring>
#include <algorithm>
#include <utility>

#include "kernels/cpu/thread_pool.h"
#include "kernels/planner.h"

namespace tc::cpu {

// Elements per chunk handed to one thread: below this, threading costs more than it saves.
inline constexpr int64_t kGrain = 32768;

// One input of a dense row: either a pointer walked with the row or one value repeated.
template <typename T, bool kScalar>
struct RowInput {
  const T* p;
  T v;
  T operator[](int64_t i) const {
    if constexpr (kScalar) {
      return v;
    } else {
      return p[i];
    }
  }
};

template <typename T>
T LoadUnaligned(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T, typename F, typename... Ins>
void DenseRow(T* __restrict out, int64_t n, const F& f, Ins... ins) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(ins[i]...);
}

// Binds inputs K.. as dense or scalar, then runs the row.
template <typename T, int K, int N, typename F, typename... Ins>
void BindRow(char* const* ptrs, const int64_t* strides, int64_t n, const F& f, Ins... ins) {
  if constexpr (K == N) {
    DenseRow(reinterpret_cast<T*>(ptrs[0]), n, f, ins...);
  } else {
    const char* p = ptrs[K + 1];
    if (strides[K + 1] == 0) {
      BindRow<T, K + 1, N>(ptrs, strides, n, f, ins..., RowInput<T, true>{nullptr, LoadUnaligned<T>(p)});
    } else {
      BindRow<T, K + 1, N>(ptrs, strides, n, f, ins...,
                           RowInput<T, false>{reinterpret_cast<const T*>(p), T{}});
    }
  }
}

template <typename T, typename F, size_t... I>
void StridedRow(char* const* ptrs, const int64_t* strides, int64_t n, const F& f,
                std::index_sequence<I...>) {
  for (int64_t i = 0; i < n; ++i) {
    *reinterpret_cast<T*>(ptrs[0] + i * strides[0]) =
        f(*reinterpret_cast<const T*>(ptrs[I + 1] + i * strides[I + 1])...);
  }
}

// One row of n elements, operand pointers `ptrs`, byte strides `strides` along the row.
template <typename T, int N, typename F>
void Row(char* const* ptrs, const int64_t* strides, int64_t n, const F& f) {
  bool dense = strides[0] == static_cast<int64_t>(sizeof(T));
  for (int k = 1; k <= N; ++k) {
    dense &= strides[k] == static_cast<int64_t>(sizeof(T)) || strides[k] == 0;
  }
  if (dense) {
    BindRow<T, 0, N>(ptrs, strides, n, f);
  } else {
    StridedRow<T>(ptrs, strides, n, f, std::make_index_sequence<N>{});
  }
}

// Applies f to every element of the plan: operands all of type T (output first), `base[k]`
// pointing at operand k's element (0, ..., 0).
template <typename T, int N, typename F>
void Elementwise(const Plan& plan, char* const* base, const F& f, ThreadPool& pool) {
  if (plan.numel == 0) return;
  const int nops = N + 1;
  pool.ParallelFor(plan.numel, kGrain, [&](int64_t begin, int64_t end) {
    // Multi-index of `begin`, dim 0 fastest.
    int64_t idx[kMaxRank] = {};
    int64_t rest = begin;
    for (int d = 0; d < plan.ndim; ++d) {
      idx[d] = rest % plan.sizes[d];
      rest /= plan.sizes[d];
    }
    int64_t row_strides[kMaxOperands];
    for (int k = 0; k < nops; ++k) row_strides[k] = plan.strides[k][0];
    for (int64_t pos = begin; pos < end;) {
      char* ptrs[kMaxOperands];
      for (int k = 0; k < nops; ++k) {
        int64_t off = 0;
        for (int d = 0; d < plan.ndim; ++d) off += idx[d] * plan.strides[k][d];
        ptrs[k] = base[k] + off;
      }
      const int64_t n = std::min(plan.sizes[0] - idx[0], end - pos);
      Row<T, N>(ptrs, row_strides, n, f);
      pos += n;
      idx[0] += n;
      for (int d = 0; d + 1 < plan.ndim && idx[d] == plan.sizes[d]; ++d) {
        idx[d] = 0;
        ++idx[d + 1];
      }
    }
  });
}

}  // namespace tc::cpu
