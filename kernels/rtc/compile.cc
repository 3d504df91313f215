#include "kernels/rtc/compile.h"

#include <nvrtc.h>

#include <chrono>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "kernels/rtc/disk_cache.h"

namespace tc::rtc {
namespace {

absl::Status Failed(const char* what, nvrtcResult r, const std::string& log = "") {
  return absl::InternalError(absl::StrCat("expression kernel: ", what, ": ",
                                          nvrtcGetErrorString(r), log.empty() ? "" : "\n", log));
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
    nvrtcVersion(&major, &minor);
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
  const std::vector<Header>& headers = Headers();
  std::vector<const char*> names, texts;
  for (const Header& h : headers) {
    names.push_back(h.name);
    texts.push_back(h.text);
  }
  nvrtcProgram program;
  if (nvrtcResult r = nvrtcCreateProgram(&program, source.c_str(), "expression.cu",
                                         static_cast<int>(headers.size()), texts.data(),
                                         names.data());
      r != NVRTC_SUCCESS) {
    return Failed("nvrtcCreateProgram", r);
  }
  struct Destroy {
    nvrtcProgram* p;
    ~Destroy() { nvrtcDestroyProgram(p); }
  } destroy{&program};
  const std::string arch_option = absl::StrCat("--gpu-architecture=sm_", arch);
  std::vector<const char*> options = {arch_option.c_str()};
  options.insert(options.end(), std::begin(kOptions), std::end(kOptions));
  const nvrtcResult r =
      nvrtcCompileProgram(program, static_cast<int>(options.size()), options.data());
  if (r != NVRTC_SUCCESS) {
    size_t size = 0;
    std::string log;
    if (nvrtcGetProgramLogSize(program, &size) == NVRTC_SUCCESS && size > 1) {
      log.resize(size);
      nvrtcGetProgramLog(program, log.data());
      log.resize(size - 1);
    }
    return Failed("nvrtcCompileProgram", r, log);
  }
  Compiled c;
  size_t size = 0;
  if (nvrtcResult e = nvrtcGetCUBINSize(program, &size); e != NVRTC_SUCCESS) {
    return Failed("nvrtcGetCUBINSize", e);
  }
  c.cubin.resize(size);
  if (nvrtcResult e = nvrtcGetCUBIN(program, c.cubin.data()); e != NVRTC_SUCCESS) {
    return Failed("nvrtcGetCUBIN", e);
  }
  c.milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return c;
}

}  // namespace tc::rtc
