#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (C++ unit and integration tests,
# the Python client test). GPU tests skip themselves where no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
# More CMake arguments may come in $TC_CMAKE_ARGS (space-separated).
read -r -a cmake_args <<<"${TC_CMAKE_ARGS:-}"
./scripts/build.sh "${cmake_args[@]}"
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j"$(nproc)" --timeout 600
