#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (C++ unit and integration tests,
# the Python client test). GPU tests skip themselves where no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
./scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j"$(nproc)" --timeout 600
