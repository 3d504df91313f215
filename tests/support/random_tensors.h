// Random tensors in awkward layouts, for checking the engine against a reference.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/tensor_view.h"

namespace tc::testing {

// A tensor with its own storage: the view points into `storage`.
struct OwnedTensor {
  std::vector<char> storage;
  TensorView view;
  OwnedTensor() = default;
  OwnedTensor(const OwnedTensor& o) : storage(o.storage), view(o.view) { view.data = Data(); }
  OwnedTensor& operator=(const OwnedTensor& o) {
    storage = o.storage;
    view = o.view;
    view.data = Data();
    return *this;
  }
  const std::byte* Data() const { return reinterpret_cast<const std::byte*>(storage.data()); }
};

// Seed for this run: $TC_TEST_SEED if set, else fresh from the system. Printed by callers so
// a failure can be replayed.
uint64_t TestSeed();

// Writes one random element of the tensor's dtype at `p`.
using ElementWriter = std::function<void(char* p)>;

// A tensor of `shape` laid out at random: dims permuted in memory, some reversed (negative
// strides), gaps between elements, a storage offset (misaligning it from 16 bytes), and
// sometimes a dim broadcast in place with stride 0. Every storage element is written by `fill`.
OwnedTensor RandomLayout(DType dtype, const DimVector& shape, std::mt19937_64& rng,
                         const ElementWriter& fill);

// A shape of rank `rank` with sizes drawn from small and odd values (1, 2, 3, 5, 7, 16, 31...).
DimVector RandomShape(int rank, std::mt19937_64& rng, int64_t max_numel);

// An input shape that broadcasts to `out`: a suffix of it, with some dims replaced by 1.
DimVector BroadcastableFrom(const DimVector& out, std::mt19937_64& rng);

// Address of element `index` (multi-index in the view's shape) of a view.
const char* ElementAt(const TensorView& v, const std::vector<int64_t>& index);

// Element index of a view that broadcasts to `out_index` (NumPy rules).
std::vector<int64_t> Project(const TensorView& v, const std::vector<int64_t>& out_index);

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
