#!/usr/bin/env bash
# On the device: two devices on one GPU against one, with the stream (waiter) counts crossed:
# is a second device slower for itself, or for the stream waiters it adds?
set -u
cd "$(dirname "$0")/../.."
[ -d .gpu/dist ] || (cd .gpu && tar -xJf dist.tar.xz)
B=$PWD/.gpu/dist/bin/tensorcompute-server
run() {
  echo "=== $1  vs  $2"
  .gpu/dist/run.sh tensorcompute-scaling-bench --server_binary="$B" --backend=cuda \
    --single_flags="$1" --multi_flags="$2" --clients=8 --seconds=5 --small_seconds=4 \
    --rounds=${ROUNDS:-1} --json="$OUT/waiters_$3.json" 2>/dev/null | grep -E "round|GB/s|req/s"
}
run "--devices=0" "--devices=0,0,--test_shared_gpu,--streams_per_device=2" a
run "--devices=0,--streams_per_device=8" "--devices=0,0,--test_shared_gpu" b
