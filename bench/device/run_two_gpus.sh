#!/usr/bin/env bash
# On a machine with two GPUs (kind nvidia-h200-x2), first of two calls: the device tests (the
# multi-device fault case among them), the scaling benchmark (--devices=0 against every GPU,
# three rounds in turn), then a 5-minute 64-client soak over every GPU started detached;
# `bench/device/soak_wait.sh` in the next call collects it. Bundle: tensorcompute-server,
# tensorcompute-soak, tensorcompute-scaling-bench and the test binaries named below.
set -u
cd "$(dirname "$0")/../.."
TESTS="${TESTS-runtime_test cuda_backend_test multi_device_test fault_test streaming_test server_test}" \
  PYTESTS= SCALING_FLAGS="${SCALING_FLAGS:---rounds=3 --label=two-GPUs}" bash bench/device/run_multi.sh
SECONDS_SOAK=${SECONDS_SOAK:-300} bash bench/device/soak_start.sh
