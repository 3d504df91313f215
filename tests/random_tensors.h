// Random tensors in awkward layouts, and a naive reference to check the engine against.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/tensor_view.h"

namespace tc::testing {

// A tensor with its own storage: the view points into `storage`.
struct OwnedTensor {
  std::vector<float> storage;
  TensorView view;
};

// Seed for this run: $TC_TEST_SEED if set, else fresh from the system. Printed by callers so
// a failure can be replayed.
uint64_t TestSeed();

// A float32 tensor of `shape` laid out at random: dims permuted in memory, some reversed
// (negative strides), gaps between elements, a storage offset, and sometimes a dim broadcast
// in place with stride 0. Values are random, including a few of large and small magnitude.
OwnedTensor RandomLayout(const DimVector& shape, std::mt19937_64& rng);

// A shape of rank `rank` with sizes drawn from small and odd values (1, 2, 3, 5, 7, 16, 31...).
DimVector RandomShape(int rank, std::mt19937_64& rng, int64_t max_numel);

// Value of element `index` (multi-index in the view's shape) of a view.
float At(const TensorView& v, const std::vector<int64_t>& index);

// Calls fn(index) for every multi-index of `shape`, C order.
template <typename Fn>
void ForEachIndex(const DimVector& shape, Fn fn) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    fn(idx);
    for (size_t k = shape.size(); k-- > 0;) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
}

}  // namespace tc::testing
