// Broadcast add through tensorcompute from C++: build/client/tensorcompute-example [HOST:PORT]
#include <cstdio>
#include <cstring>
#include <vector>

#include "client/client.h"

namespace v1 = ::tensorcompute::v1;

v1::Tensor Float32(std::vector<int64_t> shape, const std::vector<float>& values) {
  v1::Tensor t;
  t.set_dtype(v1::float32);
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(values.data(), values.size() * sizeof(float));
  return t;
}

int main(int argc, char** argv) {
  tc::client::Client client(argc > 1 ? argv[1] : "127.0.0.1:50051");
  v1::Attribute alpha;
  alpha.set_float_value(2.0);
  auto out = client.Compute(
      "add", {Float32({2, 3}, {0, 1, 2, 3, 4, 5}), Float32({3}, {10, 20, 30})}, {{"alpha", alpha}});
  if (!out.ok()) {
    std::fprintf(stderr, "%s\n", out.status().ToString().c_str());
    return 1;
  }
  std::vector<float> v(out->data().size() / sizeof(float));
  std::memcpy(v.data(), out->data().data(), out->data().size());
  for (size_t i = 0; i < v.size(); ++i) std::printf("%g%c", v[i], (i + 1) % 3 ? ' ' : '\n');
  return 0;
}
