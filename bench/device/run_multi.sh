#!/usr/bin/env bash
# On the device: the device tests of this change, then the scaling benchmark. Results in $OUT.
set -u
cd "$(dirname "$0")/../.."
[ -d .gpu/dist ] || (cd .gpu && tar -xJf dist.tar.xz)
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -8
export TC_SERVER_BINARY=$PWD/.gpu/dist/bin/tensorcompute-server TC_TEST_BACKEND=cuda
for t in ${TESTS-runtime_test cuda_backend_test multi_device_test fault_test streaming_test server_test kserve_v2_test}; do
  filter=""
  [ "$t" = cuda_backend_test ] && filter="--gtest_filter=${CUDA_FILTER:-*}"
  echo "=== $t"
  timeout 300 .gpu/dist/run.sh "$t" --gtest_brief=1 $filter > "$OUT/$t.log" 2>&1; rc=$?
  grep -E "^device 0 ->|SKIPPED|FAILED|Failure|PASSED" "$OUT/$t.log" | head -12; echo "rc=$rc"
done
if [ -n "${PYTESTS-1}" ]; then
  echo "=== test_kserve_v2.py"
  PYTHONPATH=.gpu/python:tests/python timeout 300 python3 tests/python/test_kserve_v2.py \
    --server "$TC_SERVER_BINARY" --backend=cuda > "$OUT/kserve_py.log" 2>&1; echo "rc=$?"
  grep -E "^(Ran|OK|FAILED)|FAIL:|ERROR:" "$OUT/kserve_py.log" | head
fi
if [ -n "${SCALING-1}" ]; then
  echo "=== scaling"
  timeout 400 .gpu/dist/run.sh tensorcompute-scaling-bench --server_binary="$TC_SERVER_BINARY" \
    --backend=cuda ${SCALING_FLAGS:-} --json="$OUT/scaling.json" > "$OUT/scaling.md" 2> "$OUT/scaling.err"
  echo "rc=$?"; cat "$OUT/scaling.md"; grep -v "^20" "$OUT/scaling.err" | head
fi
