#include "tests/add_conformance.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/random_tensors.h"

namespace tc::testing {
namespace {

// An input shape that broadcasts to `out`: a suffix of it, with some dims replaced by 1.
DimVector BroadcastableFrom(const DimVector& out, std::mt19937_64& rng) {
  const size_t drop = out.empty() ? 0 : rng() % (out.size() + 1);
  DimVector s(out.begin() + (rng() % 2 ? 0 : drop), out.end());
  for (int64_t& d : s) {
    if (rng() % 4 == 0) d = 1;
  }
  return s;
}

}  // namespace

void CheckRandomAdds(Backend& backend, uint64_t seed, int cases, int64_t max_numel) {
  std::mt19937_64 rng(seed);
  static constexpr double kAlphas[] = {1.0, 2.5, -1.0, 0.5, 0.0};
  for (int c = 0; c < cases; ++c) {
    const int rank = static_cast<int>(rng() % 7);
    const DimVector out_shape = RandomShape(rank, rng, max_numel);
    OwnedTensor a = RandomLayout(BroadcastableFrom(out_shape, rng), rng);
    OwnedTensor b = RandomLayout(BroadcastableFrom(out_shape, rng), rng);
    if (rng() % 2) std::swap(a, b);
    const double alpha = kAlphas[rng() % std::size(kAlphas)];
    SCOPED_TRACE(::testing::Message()
                 << "seed " << seed << " case " << c << ": a " << ShapeToString(a.view.shape)
                 << " strides " << ShapeToString(a.view.strides) << " offset " << a.view.offset
                 << ", b " << ShapeToString(b.view.shape) << " strides "
                 << ShapeToString(b.view.strides) << " offset " << b.view.offset << ", alpha "
                 << alpha);

    const TensorView inputs[] = {a.view, b.view};
    auto op = PrepareOp("add", inputs, {{"alpha", alpha}});
    ASSERT_TRUE(op.ok()) << op.status();
    const DimVector& shape = op->plan.out_shape;
    std::vector<float> out(op->plan.numel, std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE(backend.Run(*op, inputs, reinterpret_cast<std::byte*>(out.data())).ok());

    // Reference: the output index mapped into each input by NumPy's rules.
    int64_t flat = 0, bad = 0;
    ForEachIndex(shape, [&](const std::vector<int64_t>& idx) {
      auto project = [&](const TensorView& v) {
        std::vector<int64_t> j(v.shape.size());
        for (size_t k = 0; k < j.size(); ++k) {
          const size_t ok = k + (shape.size() - v.shape.size());
          j[k] = v.shape[k] == 1 ? 0 : idx[ok];
        }
        return At(v, j);
      };
      const double x = project(a.view), y = project(b.view);
      const double want = x + alpha * y;
      const double got = out[flat++];
      // float32 arithmetic (with or without a fused multiply-add) is within a few ulps of
      // the exact value, relative to the operands' magnitudes.
      const double tol = 4 * std::numeric_limits<float>::epsilon() * (std::fabs(x) + std::fabs(alpha * y)) +
                         std::numeric_limits<float>::denorm_min();
      if (!(std::fabs(got - want) <= tol) && bad++ < 5) {
        ADD_FAILURE() << "element " << flat - 1 << ": got " << got << ", want " << want;
      }
    });
    ASSERT_EQ(bad, 0);
  }
}

}  // namespace tc::testing
