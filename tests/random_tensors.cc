#include "tests/random_tensors.h"

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
  static constexpr int64_t kSizes[] = {1, 1, 2, 3, 4, 5, 7, 8, 16, 17, 31, 64, 127};
  for (;;) {
    DimVector shape(rank);
    int64_t n = 1;
    for (int64_t& d : shape) {
      d = kSizes[rng() % std::size(kSizes)];
      n *= d;
    }
    if (n <= max_numel) return shape;
  }
}

OwnedTensor RandomLayout(const DimVector& shape, std::mt19937_64& rng) {
  const int rank = static_cast<int>(shape.size());
  OwnedTensor t;
  t.view.dtype = DType::kFloat32;
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
    const bool broadcast = shape[d] > 1 && rng() % 8 == 0;
    if (broadcast) continue;  // stride 0: every index along d reads the same element
    const int64_t gap = rng() % 4 == 0 ? 2 : 1;
    t.view.strides[d] = extent * gap;
    extent *= std::max<int64_t>(shape[d], 1) * gap;
  }
  // Reverse some dims: start at the far end and walk back.
  int64_t offset = rng() % 3;  // misaligned offsets too
  for (int d = 0; d < rank; ++d) {
    if (t.view.strides[d] != 0 && rng() % 4 == 0) {
      offset += (shape[d] - 1) * t.view.strides[d];
      t.view.strides[d] = -t.view.strides[d];
    }
  }
  const int64_t storage_elems = offset + extent + static_cast<int64_t>(rng() % 3);
  t.storage.resize(storage_elems);
  std::uniform_real_distribution<float> uni(-10.0f, 10.0f);
  for (float& x : t.storage) {
    const auto r = rng() % 50;
    x = r == 0 ? uni(rng) * 1e30f : r == 1 ? uni(rng) * 1e-30f : r == 2 ? 0.0f : uni(rng);
  }
  t.view.offset = offset;
  t.view.data = reinterpret_cast<const std::byte*>(t.storage.data());
  t.view.storage_bytes = storage_elems * static_cast<int64_t>(sizeof(float));
  return t;
}

float At(const TensorView& v, const std::vector<int64_t>& index) {
  int64_t e = v.offset;
  for (size_t k = 0; k < index.size(); ++k) e += index[k] * v.strides[k];
  return reinterpret_cast<const float*>(v.data)[e];
}

}  // namespace tc::testing
