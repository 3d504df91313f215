#include "server/memory_release.h"

#include <chrono>
#include <utility>

#if defined(TC_TCMALLOC)
#include <gperftools/malloc_extension_c.h>
#elif defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tc::server {

int64_t MemoryReleaser::ReleaseOnce(bool busy, int64_t cushion_bytes) {
#if defined(TC_TCMALLOC)
  size_t free_bytes = 0;
  if (!MallocExtension_GetNumericProperty("tcmalloc.pageheap_free_bytes", &free_bytes)) return 0;
  const int64_t keep = busy ? cushion_bytes : 0;
  const int64_t excess = static_cast<int64_t>(free_bytes) - keep;
  if (excess <= 0) return 0;
  MallocExtension_ReleaseToSystem(static_cast<size_t>(excess));
  return excess;
#elif defined(__GLIBC__)
  // glibc keeps what was freed in per-thread arenas; trimming gives whole free pages back.
  (void)busy;
  (void)cushion_bytes;
  malloc_trim(0);
  return 0;
#else
  (void)busy;
  (void)cushion_bytes;
  return 0;
#endif
}

MemoryReleaser::MemoryReleaser(std::function<bool()> busy, int64_t cushion_bytes)
    : busy_(std::move(busy)), cushion_(cushion_bytes) {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    int idle_seconds = 0;
    while (!cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; })) {
      lock.unlock();
      // A client that calls again and again leaves gaps between its calls: only a server
      // idle at two checks in a row counts as idle.
      idle_seconds = busy_() ? 0 : idle_seconds + 1;
      ReleaseOnce(idle_seconds < 2, cushion_);
      lock.lock();
    }
  });
}

MemoryReleaser::~MemoryReleaser() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace tc::server
