#!/usr/bin/env bash
# On the device: several devices on one GPU (--test_shared_gpu): the multi-device tests, the
# scaling benchmark's placement and cross-device add, and a soak over both; then a soak of small
# requests alone with SMALL_SOAK=SECONDS (is the per-minute rate flat without the large ones?).
set -u
cd "$(dirname "$0")/../.."
[ -d .gpu/dist ] || (cd .gpu && tar -xJf dist.tar.xz)
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
export TC_SERVER_BINARY=$PWD/.gpu/dist/bin/tensorcompute-server TC_TEST_BACKEND=cuda
echo "=== multi_device_test, two devices on GPU 0"
TC_TEST_DEVICE_FLAGS="--devices=0,0,--test_shared_gpu" timeout 300 .gpu/dist/run.sh multi_device_test \
  > "$OUT/multi_device_test.log" 2>&1; echo "rc=$?"
grep -E "^\[ *(OK|FAILED|SKIPPED|PASSED) |requests$|Failure" "$OUT/multi_device_test.log" | head -20
echo "=== scaling, two devices on GPU 0"
timeout 200 .gpu/dist/run.sh tensorcompute-scaling-bench --server_binary="$TC_SERVER_BINARY" \
  --backend=cuda --multi_flags=--devices=0,0,--test_shared_gpu --clients=8 --seconds=5 \
  --small_seconds=3 --json="$OUT/scaling_shared.json" 2> "$OUT/scaling_shared.err" | tail -12
echo "rc=$?"
echo "=== soak, two devices on GPU 0, ${SHARED_SOAK:-90} s"
timeout 200 .gpu/dist/run.sh tensorcompute-soak --server_binary="$TC_SERVER_BINARY" --backend=cuda \
  --server_flags=--devices=0,0,--test_shared_gpu --clients=64 --seconds=${SHARED_SOAK:-90} \
  --print_seconds=30 --json="$OUT/soak_shared.json" 2>&1 | grep -v "^20" | tail -9
for t in ${TESTS-streaming_test fault_test}; do
  echo "=== $t"
  timeout 300 .gpu/dist/run.sh "$t" --gtest_brief=1 > "$OUT/$t.log" 2>&1; echo "rc=$?"
  grep -E "FAILED|Failure|PASSED" "$OUT/$t.log" | head -5
done
[ "${SMALL_SOAK:-0}" = 0 ] && exit 0
echo "=== soak, small requests only, ${SMALL_SOAK} s"
timeout 330 .gpu/dist/run.sh tensorcompute-soak --server_binary="$TC_SERVER_BINARY" --backend=cuda \
  --clients=64 --weights=1,0,0 --seconds=${SMALL_SOAK} --print_seconds=60 \
  --json="$OUT/soak_small.json" 2>&1 | grep -v "^20" | tail -12
