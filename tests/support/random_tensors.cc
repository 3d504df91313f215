#include "tests/support/random_tensors.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

namespace tc::testing {

uint64_t TestSeed() {
  if (const char* s = std::getenv("TC_TEST_SEED")) return std::strtoull(s, nullptr, 0);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

DimVector RandomShape(int rank, std::mt19937_64& rng, int64_t max_numel) {
  static constexpr int64_t kSizes[] = {1, 1, 2, 3, 4, 5, 7, 8, 16, 17, 31, 64, 127, 1023, 65537};
  for (;;) {
    DimVector shape(rank);
    int64_t n = 1;
    for (int64_t& d : shape) {
      d = kSizes[rng() % std::size(kSizes)];
      n = n > max_numel ? n : n * d;  // stop growing (and never overflow) once too large
    }
    if (n <= max_numel) return shape;
  }
}

DimVector BroadcastableFrom(const DimVector& out, std::mt19937_64& rng) {
  const size_t drop = out.empty() ? 0 : rng() % (out.size() + 1);
  DimVector s(out.begin() + (rng() % 2 ? 0 : drop), out.end());
  for (int64_t& d : s) {
    if (rng() % 4 == 0) d = 1;
  }
  return s;
}

OwnedTensor RandomLayout(DType dtype, const DimVector& shape, std::mt19937_64& rng,
                         const ElementWriter& fill) {
  const int rank = static_cast<int>(shape.size());
  OwnedTensor t;
  t.view.dtype = dtype;
  t.view.shape = shape;
  t.view.strides.assign(rank, 0);

  // Memory order: a random permutation of the dims; each dim's stride is the extent of the
  // faster dims times a gap of 1 or 2.
  std::vector<int> order(rank);
  std::iota(order.begin(), order.end(), 0);
  if (rng() % 2) std::shuffle(order.begin(), order.end(), rng);
  int64_t extent = 1;
  for (int k = rank; k-- > 0;) {
    const int d = order[k];
    if (shape[d] > 1 && rng() % 8 == 0) continue;  // stride 0: one element along d
    const int64_t gap = rng() % 4 == 0 ? 2 : 1;
    t.view.strides[d] = extent * gap;
    extent *= std::max<int64_t>(shape[d], 1) * gap;
  }
  // Reverse some dims: start at the far end and walk back.
  int64_t offset = static_cast<int64_t>(rng() % 3);
  for (int d = 0; d < rank; ++d) {
    if (t.view.strides[d] != 0 && rng() % 4 == 0) {
      offset += (shape[d] - 1) * t.view.strides[d];
      t.view.strides[d] = -t.view.strides[d];
    }
  }
  const int64_t storage_elems = offset + extent + static_cast<int64_t>(rng() % 3);
  const int64_t item = ItemSize(dtype);
  t.storage.resize(storage_elems * item);
  for (int64_t e = 0; e < storage_elems; ++e) fill(t.storage.data() + e * item);
  t.view.offset = offset;
  t.view.data = t.Data();
  t.view.storage_bytes = storage_elems * item;
  return t;
}

const char* ElementAt(const TensorView& v, const std::vector<int64_t>& index) {
  int64_t e = v.offset;
  for (size_t k = 0; k < index.size(); ++k) e += index[k] * v.strides[k];
  return reinterpret_cast<const char*>(v.data) + e * ItemSize(v.dtype);
}

std::vector<int64_t> Project(const TensorView& v, const std::vector<int64_t>& out_index) {
  std::vector<int64_t> j(v.shape.size());
  for (size_t k = 0; k < j.size(); ++k) {
    j[k] = v.shape[k] == 1 ? 0 : out_index[k + out_index.size() - v.shape.size()];
  }
  return j;
}

}  // namespace tc::testing
