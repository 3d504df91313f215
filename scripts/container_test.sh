#!/usr/bin/env bash
# The container deployment, run (CI's last step; as root): installs Docker and debootstrap from
# Debian where missing, starts dockerd where none runs, makes the Debian base image where no
# registry can be reached (deploy/debian-base.sh), builds the CPU image from the build tree
# test.sh compiled (TC_PREBUILT=build: no second compile inside the image), and runs
# tests/python/test_container.py against the compose file's CPU service on 127.0.0.1.
#   scripts/container_test.sh [BUILD_DIR]     # default build/
#   TC_PREBUILT= scripts/container_test.sh    # compile inside the image instead, as users do
#   scripts/container_test.sh --prepare       # only Docker, dockerd and the base image (CI runs
#                                             # it beside the build: downloads, mostly)
set -euo pipefail
cd "$(dirname "$0")/.."
prepare=0
if [[ "${1:-}" == --prepare ]]; then prepare=1; shift; fi
build_dir=${1:-${BUILD_DIR:-build}}
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if ((${#missing[@]})); then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# A dockerd this script starts is stopped by the run that is not --prepare.
pidfile=/tmp/tc-container-test-dockerd.pid
if ! docker info >/dev/null 2>&1; then
  log=/tmp/tc-container-test-dockerd.log
  # Its own session, output to a file: nothing of it holds the caller's terminal or pipes.
  $sudo setsid dockerd >"$log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { tail -20 "$log"; echo "container_test: dockerd did not start" >&2; exit 1; }
fi
deploy/debian-base.sh
if ((prepare)); then exit 0; fi
cleanup() {
  if [[ -f "$pidfile" ]]; then
    pid=$(cat "$pidfile")
    $sudo kill "$pid" 2>/dev/null || true
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    rm -f "$pidfile"
  fi
}
trap cleanup EXIT
export TC_PREBUILT=${TC_PREBUILT-$build_dir}
if [[ -n "$TC_PREBUILT" && "$TC_PREBUILT" != build ]]; then
  echo "container_test: the Docker context carries build/ only (.dockerignore); TC_PREBUILT=$TC_PREBUILT" >&2
  exit 1
fi
start=$(date +%s)
docker-compose -p tccontainertest -f deploy/docker-compose.yml --profile cpu build -q tensorcompute-cpu
echo "container_test: image tensorcompute:cpu built in $(($(date +%s) - start)) s (TC_PREBUILT=${TC_PREBUILT:-none: compiled in the image})"
PYTHONPATH="$build_dir/python" PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 tests/python/test_container.py \
  --cli "$build_dir/client/tensorcompute-cli"
