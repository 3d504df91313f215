#!/usr/bin/env bash
# On the device: CUDA tests of the waiter-spin cap, then small adds at 64 in flight with 4 and
# 8 streams (8 waiters: what two GPUs of 4 streams have), before (-old) and after the cap.
set -u
cd "$(dirname "$0")/../.."
[ -d .gpu/dist ] || (cd .gpu && tar -xJf dist.tar.xz)
TESTS="${TESTS-cuda_backend_test streaming_test fault_test}" PYTESTS= SCALING= bash bench/device/run_multi.sh
for round in 1 2; do
  for b in tensorcompute-server-old tensorcompute-server; do
    echo "=== $b, round $round"
    .gpu/dist/run.sh tensorcompute-scaling-bench --server_binary="$PWD/.gpu/dist/bin/$b" \
      --backend=cuda --clients=0 --single_flags=--streams_per_device=4 \
      --multi_flags=--streams_per_device=8 --rounds=2 --small_seconds=5 --small_concurrency=64 \
      --json="$OUT/spin_${b}_$round.json" 2>/dev/null | grep -E "round|small adds"
  done
done
