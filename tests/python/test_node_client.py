#!/usr/bin/env python3
"""Runs the Node.js example (client/node, @grpc/grpc-js and @grpc/proto-loader from npm)
against the real server and checks what it prints. Exits 77 (skipped) where node or the npm
registry is not available."""
import argparse
import os
import shutil
import subprocess
import sys

from harness import start_server, stop_server

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE_DIR = os.path.join(REPO, "client", "node")

EXPECTED = [
    "add: shape [2,3] values [21,42,63,24,45,66]",
    "neg of transpose: shape [3,2] values [-1,-4,-2,-5,-3,-6]",
    "resident square: [1,4,9,16]",
    "released 32 bytes",
    "error: INVALID_ARGUMENT",
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    args = parser.parse_args()
    if shutil.which("node") is None or shutil.which("npm") is None:
        print("SKIP: node and npm are not installed")
        return 77
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "@grpc", "grpc-js")):
        r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR,
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            print("SKIP: npm ci failed (is the npm registry reachable?)\n" + r.stderr[-2000:])
            return 77
    proc, target = start_server(args.server)
    try:
        r = subprocess.run(["node", os.path.join(NODE_DIR, "example.js"), target],
                           capture_output=True, text=True, timeout=60)
    finally:
        stop_server(proc)
    print(r.stdout)
    print(r.stderr, file=sys.stderr)
    if r.returncode != 0:
        print(f"FAIL: node exited with {r.returncode}")
        return 1
    lines = r.stdout.splitlines()
    if not lines or not lines[0].startswith("server ") or "backend cpu" not in lines[0]:
        print("FAIL: no server info line")
        return 1
    missing = [e for e in EXPECTED if e not in lines]
    if missing:
        print(f"FAIL: missing lines {missing}")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
