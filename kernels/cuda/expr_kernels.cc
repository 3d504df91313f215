#include "kernels/cuda/expr_kernels.h"

#include <chrono>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/rtc/compile.h"

namespace tc::cuda {

ExprKernel::~ExprKernel() { (void)cudaLibraryUnload(library_); }

ExprLaunch PrepareExprLaunch(const expr::Program& program, char* const* base, int multiprocessors,
                             int arch) {
  ExprLaunch l;
  const int vector = expr::VectorFor(program, base);
  l.source = rtc::GenerateSource(program, vector);
  l.arch = arch;
  l.parts = rtc::Walk(program, vector, base, multiprocessors);
  return l;
}

absl::Status LaunchExpr(const ExprLaunch& launch, const ExprKernel& kernel,
                        const expr::Program& program, const LaunchEnv& env) {
  // Each parameter from its own 16-byte aligned copy: the launch reads them as the kernel's
  // parameter types, whose alignment is at most 16.
  const std::string evaluator = rtc::EvaluatorParam(program, env.error);
  const auto aligned = [](const std::string& p) {
    std::unique_ptr<std::max_align_t[]> copy(
        new std::max_align_t[(p.size() + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t) +
                             1]);
    std::memcpy(copy.get(), p.data(), p.size());
    return copy;
  };
  const std::unique_ptr<std::max_align_t[]> e = aligned(evaluator);
  for (const rtc::WalkPart& part : launch.parts) {
    const std::unique_ptr<std::max_align_t[]> a = aligned(part.args);
    void* args[2] = {e.get(), a.get()};
    const rtc::Geometry& g = part.geometry;
    const cudaError_t r = cudaLaunchKernel(
        reinterpret_cast<const void*>(kernel.kernel()), dim3(g.grid[0], g.grid[1], g.grid[2]),
        dim3(g.block[0], g.block[1], g.block[2]), args, 0, env.stream);
    if (r != cudaSuccess) {
      (void)cudaGetLastError();
      return absl::InternalError(
          absl::StrCat("expression kernel launch failed: ", cudaGetErrorString(r)));
    }
  }
  return absl::OkStatus();
}

struct ExprKernelCache::State {
  Options options;
  mutable std::mutex mu;
  std::condition_variable work;
  struct Entry {
    std::shared_ptr<const ExprKernel> kernel;  // null while compiling
    std::vector<Ready> waiting;
    std::list<std::string>::iterator lru;
  };
  // Key: arch, then the source.
  std::unordered_map<std::string, Entry> entries;
  std::list<std::string> lru;                     // compiled entries, most recently used first
  std::deque<std::pair<std::string, int>> queue;  // keys to compile, with their arch
  std::vector<std::thread> threads;
  bool stop = false;
  bool warmed = false;
  StepMode step_mode = StepMode::kWhileCompiling;
  ExprCacheStats stats;
  std::shared_ptr<rtc::DiskCache> disk;

  // With mu held: the kernel of entry `it` as a hit (now the most recently used), or null
  // where there is no entry or it is compiling.
  std::shared_ptr<const ExprKernel> Hit(std::unordered_map<std::string, Entry>::iterator it) {
    if (it == entries.end() || it->second.kernel == nullptr) return nullptr;
    lru.splice(lru.begin(), lru, it->second.lru);
    ++stats.hits;
    return it->second.kernel;
  }
  // With mu held: a new entry for `key`, queued for a compile thread (notify `work` after).
  Entry& Start(std::string key, int arch) {
    Entry& e = entries[key];
    e.lru = lru.end();
    queue.emplace_back(std::move(key), arch);
    return e;
  }
};

namespace {

// The kernel in `cubin`, loaded.
absl::StatusOr<std::shared_ptr<const ExprKernel>> LoadKernel(const std::string& cubin) {
  cudaLibrary_t library;
  cudaKernel_t kernel;
  cudaError_t e =
      cudaLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (e == cudaSuccess) {
    e = cudaLibraryGetKernel(&kernel, library, "tc_expr");
    if (e != cudaSuccess) (void)cudaLibraryUnload(library);
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::InternalError(
        absl::StrCat("loading an expression kernel failed: ", cudaGetErrorString(e)));
  }
  return std::make_shared<const ExprKernel>(library, kernel);
}

}  // namespace

void ExprKernelCache::UseDisk(std::shared_ptr<rtc::DiskCache> disk) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->disk = std::move(disk);
}

ExprKernelCache& ExprKernelCache::Shared() {
  // Never destroyed: its threads may be compiling when the process exits.
  static ExprKernelCache* cache = new ExprKernelCache(Options{});
  return *cache;
}

ExprKernelCache::ExprKernelCache(Options options) : state_(new State) {
  state_->options = options;
  for (int i = 0; i < options.max_compiling; ++i) state_->threads.emplace_back([this] { Work(); });
}

ExprKernelCache::~ExprKernelCache() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->work.notify_all();
  for (std::thread& t : state_->threads) t.join();
}

void ExprKernelCache::Get(const std::string& source, int arch, Ready ready) {
  State& s = *state_;
  std::string key = absl::StrCat(arch, "\n", source);
  std::unique_lock<std::mutex> lock(s.mu);
  auto it = s.entries.find(key);
  if (std::shared_ptr<const ExprKernel> kernel = s.Hit(it)) {
    lock.unlock();
    ready(std::move(kernel));
    return;
  }
  if (it != s.entries.end()) {
    ++s.stats.misses;
    it->second.waiting.push_back(std::move(ready));
    return;
  }
  if (static_cast<int>(s.queue.size()) >= s.options.max_waiting) {
    ++s.stats.refused;
    lock.unlock();
    ready(absl::ResourceExhaustedError(
        absl::StrCat("too many new expressions are waiting to be compiled (", s.options.max_waiting,
                     "); retry shortly")));
    return;
  }
  ++s.stats.misses;
  s.Start(std::move(key), arch).waiting.push_back(std::move(ready));
  lock.unlock();
  s.work.notify_one();
}

std::shared_ptr<const ExprKernel> ExprKernelCache::GetOrStart(const std::string& source, int arch) {
  State& s = *state_;
  std::string key = absl::StrCat(arch, "\n", source);
  std::unique_lock<std::mutex> lock(s.mu);
  auto it = s.entries.find(key);
  if (std::shared_ptr<const ExprKernel> kernel = s.Hit(it)) return kernel;
  if (it != s.entries.end() || static_cast<int>(s.queue.size()) >= s.options.max_waiting) {
    return nullptr;
  }
  s.Start(std::move(key), arch);
  lock.unlock();
  s.work.notify_one();
  return nullptr;
}

void ExprKernelCache::CountStepwise() {
  std::lock_guard<std::mutex> lock(state_->mu);
  ++state_->stats.stepwise;
}

void ExprKernelCache::SetStepMode(StepMode mode) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->step_mode = mode;
}

StepMode ExprKernelCache::step_mode() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->step_mode;
}

void ExprKernelCache::Warm(int arch) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->warmed) return;
    state_->warmed = true;
    // An empty key: compiled, not kept.
    state_->queue.emplace_front(std::string(), arch);
  }
  state_->work.notify_one();
}

void ExprKernelCache::Work() {
  State& s = *state_;
  for (;;) {
    std::string key;
    int arch = 0;
    {
      std::unique_lock<std::mutex> lock(s.mu);
      s.work.wait(lock, [&] { return s.stop || !s.queue.empty(); });
      if (s.stop) return;
      key = std::move(s.queue.front().first);
      arch = s.queue.front().second;
      s.queue.pop_front();
      if (key.empty()) {
        lock.unlock();
        (void)rtc::CompileToCubin(
            "#include \"kernels/rtc/prelude.cuh\"\nextern \"C\" __global__ void tc_expr() {}\n",
            arch);
        continue;
      }
      ++s.stats.compiling;
    }
    const std::string source = key.substr(key.find('\n') + 1);
    std::shared_ptr<rtc::DiskCache> disk;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      disk = s.disk;
    }
    absl::StatusOr<std::shared_ptr<const ExprKernel>> result;
    const auto start = std::chrono::steady_clock::now();
    // From disk when it is there (verified by the disk cache); compiled otherwise, or when
    // the driver will not load what the disk held.
    const std::string disk_key = disk == nullptr ? std::string() : rtc::DiskKey(source, arch);
    bool from_disk = false;
    if (disk != nullptr) {
      if (std::optional<std::string> cubin = disk->Load(disk_key)) {
        result = LoadKernel(*cubin);
        from_disk = result.ok();
      }
    }
    if (!from_disk) {
      auto compiled = rtc::CompileToCubin(source, arch);
      if (!compiled.ok()) {
        result = compiled.status();
      } else {
        result = LoadKernel(compiled->cubin);
        if (result.ok() && disk != nullptr) (void)disk->Store(disk_key, compiled->cubin);
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::vector<Ready> waiting;
    std::vector<std::shared_ptr<const ExprKernel>> evicted;  // unloaded outside the lock
    {
      std::lock_guard<std::mutex> lock(s.mu);
      --s.stats.compiling;
      auto it = s.entries.find(key);
      waiting = std::move(it->second.waiting);
      if (result.ok()) {
        ++(from_disk ? s.stats.disk_loads : s.stats.compiles);
        s.stats.compile_seconds += seconds;
        it->second.kernel = *result;
        s.lru.push_front(key);
        it->second.lru = s.lru.begin();
        while (s.lru.size() > s.options.max_entries) {
          auto last = s.entries.find(s.lru.back());
          evicted.push_back(std::move(last->second.kernel));
          s.entries.erase(last);
          s.lru.pop_back();
          ++s.stats.evictions;
        }
      } else {
        // Not kept: a later request tries again.
        ++s.stats.compile_failures;
        s.entries.erase(it);
      }
    }
    for (Ready& r : waiting) r(result);
  }
}

ExprCacheStats ExprKernelCache::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  ExprCacheStats st = state_->stats;
  st.entries = state_->lru.size();
  if (state_->disk != nullptr) st.disk = state_->disk->stats();
  return st;
}

}  // namespace tc::cuda
