// How the CPU backend writes outputs too large to stay in the caches: with non-temporal
// (streaming) stores, which skip reading each output line before overwriting it, or with plain
// stores. Which is faster depends on the machine. On the 2-core Intel Xeon the loops were first
// tuned on, streaming won; on a 2-core AMD EPYC (Zen 5) plain stores won by a fifth or more
// (float32 add over 2^24 elements: 3.6 against 5.5 ms on two threads, 7.4 against 9.2 on one,
// bench/results/2026-11-27-cpu-2core-amd-zen5.md). A short probe at start-up did not
// predict it (a one-input copy favoured streaming where two-input adds did not), so the
// choice follows the vendor, and TC_CPU_STREAMING_STORES=on|off overrides it.
#pragma once

#include <string>

namespace tc::cpu {

struct StorePath {
  bool streaming = true;
  // What decided: "TC_CPU_STREAMING_STORES", or the CPU's vendor.
  std::string decided_by;
};

// Decided on first use, then the same for the process.
const StorePath& LargeOutputStores();

}  // namespace tc::cpu
