#!/usr/bin/env bash
# Builds the whole suite with clang under AddressSanitizer and UndefinedBehaviorSanitizer
# (CPU only) into build-sanitize/ (or $BUILD_DIR), with the libFuzzer harnesses, and runs the
# tests there. Then each fuzzer for $FUZZ_SECONDS (default 60) from its seed corpus, as many at
# once as there are cores.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
if ! command -v clang++ >/dev/null || ! dpkg-query -W -f='${Status}' libclang-rt-14-dev 2>/dev/null | grep -q "install ok installed"; then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev
fi
build_dir=${BUILD_DIR:-build-sanitize}
# fuzzer-no-link: coverage for the fuzzers in every library, not only in their own files.
flags="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# The CPU loops' AVX copies are left to test.sh's build (TC_CPU_ISA_VARIANTS): the same source
# as the baseline, held to its bytes there, and eight more long compiles here.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWITH_CUDA=OFF -DTC_TCMALLOC=OFF \
  -DTC_CPU_ISA_VARIANTS=OFF \
  -DTC_SOAK_SECONDS="${SOAK_SECONDS:-20}" -DTC_SOAK_RSS_SLACK_MIB=512 \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DTC_FUZZ=ON \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
cmake --build "$build_dir" -j"$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Streaming more than 2 GiB takes four minutes under the sanitizers: it runs unsanitized in
# test.sh, and the same stream code runs here with every other streaming test. The Dask and
# replica-failover tests exercise the Python client's spreading and retries (run in test.sh);
# the server requests they make are the ones python_package_test makes here.
(cd "$build_dir" && ctest --output-on-failure -j"$(nproc)" \
  -E '^(LargeStreamTest\.MoreThanTwoGibibytes|dask_test|replicas_failover_test)$')
seconds=${FUZZ_SECONDS:-60}
seed=${FUZZ_SEED:-1}
runs=${FUZZ_RUNS:--1}
# Each fuzzer is one process on one core: as many run at once as there are cores.
fuzz_one() {
  local f=$1 name corpus log
  name=$(basename "$f")
  corpus=$(mktemp -d)
  log=$(mktemp)
  cp fuzz/corpus/"${name%_fuzzer}"/* "$corpus"/
  # A fixed seed and run count make CI's run repeatable: the same tree fuzzes the same inputs,
  # so a crash shows up before a change lands, not at random later. FUZZ_SEED=0 picks a seed
  # from the clock for exploratory runs.
  if "$f" -seed="$seed" -runs="$runs" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix="$build_dir/$name-" "$corpus" >"$log" 2>&1; then
    echo "fuzz: $name for up to ${seconds}s: passed"
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$log" || true
    rm -rf "$corpus" "$log"
  else
    tail -60 "$log"
    echo "fuzz: $name FAILED (reproducer in $build_dir/$name-*)"
    rm -rf "$corpus" "$log"
    return 1
  fi
}
jobs_max=$(nproc)
failed=$(mktemp)
for f in "$build_dir"/fuzz/*_fuzzer; do
  # Each fuzzer's output is printed whole when it ends (fuzz_one holds it in a log).
  { fuzz_one "$f" || basename "$f" >>"$failed"; } &
  while (( $(jobs -rp | wc -l) >= jobs_max )); do wait -n || true; done
done
wait
status=0
if [[ -s $failed ]]; then
  echo "fuzz: failed: $(tr '\n' ' ' <"$failed")"
  status=1
fi
rm -f "$failed"
exit $status
