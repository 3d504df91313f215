#include "server/env/log.h"

#include <cstdio>
#include <cstdlib>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tc::server {

void Log(const std::string& line) {
  std::fprintf(stderr, "%s tensorcompute: %s\n",
               absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()).c_str(),
               line.c_str());
}

[[noreturn]] void Fail(const std::string& line, int code) {
  Log(line);
  std::exit(code);
}

}  // namespace tc::server
