// Compiling a fused expression's generated source (kernels/rtc/codegen.h) with NVRTC, against
// the functor headers built into the server (no file of the machine's is read): to a cubin
// for one GPU architecture.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tc::rtc {

// A header NVRTC may include, by the name the sources include it with.
struct Header {
  const char* name;
  const char* text;
};
const std::vector<Header>& Headers();

struct Compiled {
  std::string cubin;
  double milliseconds = 0;
};

// Compiles `source` for compute capability `arch` (90 for sm_90). A source that does not
// compile is the generator's fault: INTERNAL, with NVRTC's log. FAILED_PRECONDITION where
// NVRTC cannot be loaded (it is opened at run time, not linked).
absl::StatusOr<Compiled> CompileToCubin(const std::string& source, int arch);

// Everything besides the source and the architecture that decides what CompileToCubin makes:
// NVRTC's version, the options, and a digest of the embedded headers. Part of the key of a
// kernel kept on disk (kernels/rtc/disk_cache.h).
const std::string& CompilerIdentity();

// The disk cache's key of the kernel CompileToCubin(source, arch) makes.
std::string DiskKey(const std::string& source, int arch);

}  // namespace tc::rtc
