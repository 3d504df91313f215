#include "kernels/cpu/store_path.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tc::cpu {
namespace {

// CPUID leaf 0's vendor string: "GenuineIntel", "AuthenticAMD", ...
std::string Vendor() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char name[13];
    std::memcpy(name, &b, 4);
    std::memcpy(name + 4, &d, 4);
    std::memcpy(name + 8, &c, 4);
    name[12] = '\0';
    return name;
  }
#endif
  return "unknown";
}

StorePath Decide() {
  StorePath p;
  if (const char* env = std::getenv("TC_CPU_STREAMING_STORES")) {
    p.streaming = std::strcmp(env, "on") == 0 || std::strcmp(env, "1") == 0;
    p.decided_by = "TC_CPU_STREAMING_STORES";
    return p;
  }
  const std::string vendor = Vendor();
  p.streaming = vendor != "AuthenticAMD";
  p.decided_by = vendor;
  return p;
}

}  // namespace

const StorePath& LargeOutputStores() {
  static const StorePath path = Decide();
  return path;
}

}  // namespace tc::cpu
