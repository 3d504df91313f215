// A fixed pool of worker threads for splitting one computation into chunks.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <deque>
#include <vector>

namespace tc {

class ThreadPool {
 public:
  // `threads` workers; 0 means one per hardware thread.
  explicit ThreadPool(int threads = 0);
  // A pool for ParallelFor on `threads` threads in all: the caller plus threads - 1 workers
  // (0: one per hardware thread), so that nothing is oversubscribed.
  static int WorkersFor(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()); }

  // Calls fn(begin, end) over [0, n) in contiguous chunks of at least `grain` items, on the
  // workers and the calling thread, and returns when every chunk is done. Safe to call from
  // several threads at once.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Runs `task` on a worker some time later.
  void Schedule(std::function<void()> task);

 private:
  void WorkerLoop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace tc
