#!/usr/bin/env bash
# Installs client/python with pip into a fresh virtual environment (seeing Debian's grpcio,
# protobuf, numpy and torch; nothing downloaded), as the README says, which builds the native
# library into the package, and runs its tests against the server: the socket path (grpcio,
# and the package's own native library), shared-memory regions, CUDA IPC (skipped without a
# GPU), and the native library given as the second argument. Then an install that could not
# build the library (TENSORCOMPUTE_NATIVE_BUILD=0): the client says so and uses grpcio.
set -euo pipefail
server=$1
native=${2:-}
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=$(mktemp -d /tmp/tc-venv-XXXXXX)
bare=$(mktemp -d /tmp/tc-venv-XXXXXX)
trap 'rm -rf "$venv" "$bare"' EXIT
install() {
  /usr/bin/python3 -m venv --system-site-packages "$1"
  # One build of the package at a time: pip builds it in the source tree (build/, egg-info),
  # which the tests running this script side by side share.
  flock -w 600 /tmp/tensorcompute-client-python-build.lock \
    "$1/bin/pip" install --quiet --no-build-isolation --no-deps --no-index "$repo/client/python" \
    2> >(grep -v -i "beta" >&2)
}
install "$venv"
cd "$repo/tests/python"
# TC_PACKAGE_TESTS: some of them only. TC_PYTHONPATH: more for them to import (the generated
# stubs of build/python).
for t in ${TC_PACKAGE_TESTS:-test_client_package.py test_package_native.py test_regions.py test_cuda_ipc.py}; do
  rc=0
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$repo/tests/python${TC_PYTHONPATH:+:$TC_PYTHONPATH}" \
    "$venv/bin/python" "$t" --server "$server" || rc=$?
  # 77: skipped (test_cuda_ipc.py where PyTorch sees no GPU).
  [[ $rc -eq 0 || $rc -eq 77 ]] || exit $rc
done
if [[ -n "$native" ]]; then
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$repo/tests/python" \
    "$venv/bin/python" test_native.py --server "$server" --native "$native"
fi
if [[ -z ${TC_PACKAGE_TESTS:-} ]]; then
  TENSORCOMPUTE_NATIVE_BUILD=0 install "$bare" 2>/dev/null
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$repo/tests/python" \
    "$bare/bin/python" test_package_native.py --server "$server" --without_library
fi
