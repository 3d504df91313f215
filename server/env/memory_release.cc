#include "server/env/memory_release.h"

#include <chrono>
#include <utility>

#if defined(TC_TCMALLOC)
#include <gperftools/malloc_extension_c.h>
#elif defined(__GLIBC__)
#include <malloc.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define TC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TC_ASAN 1
#endif
#endif
#ifndef TC_ASAN
#define TC_ASAN 0
#endif

namespace tc::server {

#if defined(TC_TCMALLOC)
namespace {
// One of tcmalloc's numeric properties; -1 where it does not know it.
int64_t TcmallocProperty(const char* name) {
  size_t v = 0;
  return MallocExtension_GetNumericProperty(name, &v) ? static_cast<int64_t>(v) : -1;
}
}  // namespace
#endif

HeapStats ReadHeapStats() {
  HeapStats h;
#if defined(TC_TCMALLOC)
  h.allocated_bytes = TcmallocProperty("generic.current_allocated_bytes");
  // Free bytes in the page heap (not yet given back) and in the caches in front of it.
  int64_t free_bytes = 0;
  for (const char* name :
       {"tcmalloc.pageheap_free_bytes", "tcmalloc.central_cache_free_bytes",
        "tcmalloc.transfer_cache_free_bytes", "tcmalloc.current_total_thread_cache_bytes"}) {
    const int64_t v = TcmallocProperty(name);
    if (v < 0) return HeapStats{h.allocated_bytes, -1};
    free_bytes += v;
  }
  h.free_bytes = free_bytes;
#elif defined(__GLIBC__) && !TC_ASAN
  // (Under AddressSanitizer, malloc is the sanitizer's: glibc's counts would say nothing.)
  const struct mallinfo2 m = mallinfo2();
  h.allocated_bytes = static_cast<int64_t>(m.uordblks + m.hblkhd);
  h.free_bytes = static_cast<int64_t>(m.fordblks);
#endif
  return h;
}

int64_t MemoryReleaser::ReleaseOnce(bool busy, int64_t cushion_bytes) {
#if defined(TC_TCMALLOC)
  const int64_t free_bytes = TcmallocProperty("tcmalloc.pageheap_free_bytes");
  if (free_bytes < 0) return 0;
  const int64_t keep = busy ? cushion_bytes : 0;
  const int64_t excess = free_bytes - keep;
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
