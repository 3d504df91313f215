#!/usr/bin/env bash
# Installs the Debian 12 packages that building and testing tensorcompute need (only the
# missing ones; apt-get runs only if something is missing).
set -euo pipefail
pkgs=(
  cmake ninja-build g++ pkg-config clang-format-14
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc grpc-proto libabsl-dev
  libgtest-dev libgmock-dev libcivetweb-dev libgoogle-perftools-dev
  python3-grpcio python3-protobuf python3-numpy python3-numexpr python3-torch
  python3-prometheus-client python3-dask python3-distributed
  python3-venv python3-setuptools python3-yaml docker-compose openssl nginx-light
)
# Node.js for the Node client's test, from Debian unless a node is installed already.
command -v node >/dev/null && command -v npm >/dev/null || pkgs+=(nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
