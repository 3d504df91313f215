// The CPU backend: runs plans on a pool of worker threads.
#pragma once

#include "util/thread_pool.h"
#include "kernels/engine.h"

namespace tc {

class CpuBackend : public Backend {
 public:
  // Computes on `threads` threads (the caller's included); 0 means one per hardware thread.
  explicit CpuBackend(int threads = 0) : pool_(ThreadPool::WorkersFor(threads)) {}
  absl::string_view name() const override { return "cpu"; }
  absl::Status Run(const PreparedOp& op, absl::Span<const TensorView> inputs,
                   std::byte* out) override;

 private:
  ThreadPool pool_;
};

}  // namespace tc
