#include "kernels/rtc/compile.h"

#include <cuda.h>
#include <dlfcn.h>
#include <nvrtc.h>

#include <chrono>
#include <iterator>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "kernels/rtc/disk_cache.h"

namespace tc::rtc {
namespace {

// NVRTC is opened when an expression first needs it, not linked: the server binary built with
// CUDA then starts, and serves on the CPU, where the toolkit's libraries are not installed (the
// CPU container image made from a CUDA build, a machine without a GPU). Looked up by its
// soname (the loader's paths, LD_LIBRARY_PATH), then in the toolkit the server was built with.
struct Nvrtc {
  decltype(&nvrtcGetErrorString) GetErrorString = nullptr;
  decltype(&nvrtcVersion) Version = nullptr;
  decltype(&nvrtcCreateProgram) CreateProgram = nullptr;
  decltype(&nvrtcDestroyProgram) DestroyProgram = nullptr;
  decltype(&nvrtcCompileProgram) CompileProgram = nullptr;
  decltype(&nvrtcGetProgramLogSize) GetProgramLogSize = nullptr;
  decltype(&nvrtcGetProgramLog) GetProgramLog = nullptr;
  decltype(&nvrtcGetCUBINSize) GetCUBINSize = nullptr;
  decltype(&nvrtcGetCUBIN) GetCUBIN = nullptr;
  std::string missing;  // why it could not be opened; empty when it was
};

const Nvrtc& Lib() {
  static const Nvrtc* lib = [] {
    auto* n = new Nvrtc;
    const std::string soname = absl::StrCat("libnvrtc.so.", CUDA_VERSION / 1000);
    void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    std::string why = handle == nullptr ? dlerror() : "";
#ifdef TC_NVRTC_TOOLKIT_DIR
    if (handle == nullptr) {
      handle =
          dlopen((std::string(TC_NVRTC_TOOLKIT_DIR "/") + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
    }
#endif
    if (handle == nullptr) {
      n->missing = absl::StrCat("NVRTC (", soname, ") cannot be loaded: ", why,
                                "; expressions on the GPU need it (LD_LIBRARY_PATH)");
      return n;
    }
    auto bind = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
      if (fn == nullptr && n->missing.empty()) {
        n->missing = absl::StrCat(soname, " lacks ", name);
      }
    };
    bind(n->GetErrorString, "nvrtcGetErrorString");
    bind(n->Version, "nvrtcVersion");
    bind(n->CreateProgram, "nvrtcCreateProgram");
    bind(n->DestroyProgram, "nvrtcDestroyProgram");
    bind(n->CompileProgram, "nvrtcCompileProgram");
    bind(n->GetProgramLogSize, "nvrtcGetProgramLogSize");
    bind(n->GetProgramLog, "nvrtcGetProgramLog");
    bind(n->GetCUBINSize, "nvrtcGetCUBINSize");
    bind(n->GetCUBIN, "nvrtcGetCUBIN");
    return n;
  }();
  return *lib;
}

absl::Status Failed(const char* what, nvrtcResult r, const std::string& log = "") {
  return absl::InternalError(absl::StrCat("expression kernel: ", what, ": ",
                                          Lib().GetErrorString(r), log.empty() ? "" : "\n", log));
}

// Unannotated functions (the headers' constexpr helpers) are device functions here.
// --no-cache: NVRTC builds may keep compiled code in a folder of their own between
// processes (the H100 machine's does: a repeated compile takes 11 instead of 49 ms), which
// nothing here verifies; the server's own caches (in memory, and kernels/rtc/disk_cache.h)
// are the only ones.
// (--Ofast-compile was measured and left off: at "mid" NVRTC took about half the time, but
// the kernels ran at 37-68% of copy bandwidth instead of 90-104%; "min" saved little and
// lost up to half; "max" ran at 1-4%.)
constexpr const char* kOptions[] = {"--std=c++17", "--device-as-default-execution-space",
                                    "--no-cache"};

}  // namespace

const std::string& CompilerIdentity() {
  static const std::string* identity = [] {
    int major = 0, minor = 0;
    if (Lib().missing.empty()) Lib().Version(&major, &minor);
    std::string headers;
    for (const Header& h : Headers()) absl::StrAppend(&headers, h.name, "\n", h.text, "\n");
    std::string options;
    for (const char* o : kOptions) absl::StrAppend(&options, " ", o);
    return new std::string(absl::StrCat("nvrtc ", major, ".", minor, "\noptions", options,
                                        "\nheaders ", DiskCache::Sha256Hex(headers), "\n"));
  }();
  return *identity;
}

std::string DiskKey(const std::string& source, int arch) {
  return absl::StrCat(CompilerIdentity(), "arch ", arch, "\n", source);
}

absl::StatusOr<Compiled> CompileToCubin(const std::string& source, int arch) {
  const auto start = std::chrono::steady_clock::now();
  const Nvrtc& nvrtc = Lib();
  if (!nvrtc.missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("expression kernel: ", nvrtc.missing));
  }
  const std::vector<Header>& headers = Headers();
  std::vector<const char*> names, texts;
  for (const Header& h : headers) {
    names.push_back(h.name);
    texts.push_back(h.text);
  }
  nvrtcProgram program;
  if (nvrtcResult r =
          nvrtc.CreateProgram(&program, source.c_str(), "expression.cu",
                              static_cast<int>(headers.size()), texts.data(), names.data());
      r != NVRTC_SUCCESS) {
    return Failed("nvrtcCreateProgram", r);
  }
  struct Destroy {
    nvrtcProgram* p;
    const Nvrtc& nvrtc;
    ~Destroy() { nvrtc.DestroyProgram(p); }
  } destroy{&program, nvrtc};
  const std::string arch_option = absl::StrCat("--gpu-architecture=sm_", arch);
  std::vector<const char*> options = {arch_option.c_str()};
  options.insert(options.end(), std::begin(kOptions), std::end(kOptions));
  const nvrtcResult r =
      nvrtc.CompileProgram(program, static_cast<int>(options.size()), options.data());
  if (r != NVRTC_SUCCESS) {
    size_t size = 0;
    std::string log;
    if (nvrtc.GetProgramLogSize(program, &size) == NVRTC_SUCCESS && size > 1) {
      log.resize(size);
      nvrtc.GetProgramLog(program, log.data());
      log.resize(size - 1);
    }
    return Failed("nvrtcCompileProgram", r, log);
  }
  Compiled c;
  size_t size = 0;
  if (nvrtcResult e = nvrtc.GetCUBINSize(program, &size); e != NVRTC_SUCCESS) {
    return Failed("nvrtcGetCUBINSize", e);
  }
  c.cubin.resize(size);
  if (nvrtcResult e = nvrtc.GetCUBIN(program, c.cubin.data()); e != NVRTC_SUCCESS) {
    return Failed("nvrtcGetCUBIN", e);
  }
  c.milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return c;
}

}  // namespace tc::rtc
