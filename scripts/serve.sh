#!/usr/bin/env bash
# Installs what is missing, builds, and runs the server in the foreground on port 50051.
# Arguments go to the server, e.g. ./scripts/serve.sh --port=6000 --backend=cpu
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
./scripts/build.sh >/dev/null
exec "${BUILD_DIR:-build}/server/tensorcompute-server" "$@"
