// A Backend over the CPU kernels (cpu::LaunchOp) on a pool of its own: what the conformance
// checks and the benchmarks drive. The server's CPU device calls cpu::LaunchOp itself.
#pragma once

#include "kernels/engine.h"
#include "tests/support/backend.h"
#include "util/thread_pool.h"

namespace tc {

class CpuBackend : public Backend {
 public:
  // Computes on `threads` threads (the caller's included); 0 means one per hardware thread.
  explicit CpuBackend(int threads = 0) : pool_(ThreadPool::WorkersFor(threads)) {}
  absl::string_view name() const override { return "cpu"; }
  TileRule tile_rule() const override { return TileRule::kAnyPermuted; }
  absl::Status Run(const PreparedOp& op, absl::Span<const TensorView> inputs,
                   std::byte* out) override;
  // Which compiled copy of the loops runs (cpu::Isa as an int; -1, the default: the
  // process's). For benchmarks that compare the vector extension levels.
  void set_isa(int isa) { isa_ = isa; }

 private:
  ThreadPool pool_;
  int isa_ = -1;
};

}  // namespace tc
