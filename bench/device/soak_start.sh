#!/usr/bin/env bash
# On the device: unpack the bundle outside the tree and start a 10-minute soak (server and
# clients) detached, so that it outlives this call; soak_wait.sh collects it. PIN=1: the
# server on cores 0-5 and the soak's clients on 6-15, started apart.
set -u
cd "$(dirname "$0")/../.."
D=/tmp/tcsoak
rm -rf "$D" && mkdir -p "$D" && tar -xJf .gpu/dist.tar.xz -C "$D"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nproc; uptime
S=${SECONDS_SOAK:-600}
if [ -n "${PIN:-}" ]; then
  setsid nohup taskset -c 0-5 "$D/dist/run.sh" tensorcompute-server --backend=cuda --port=0 \
    --port_file="$D/port" --metrics_port=0 > "$D/server.log" 2>&1 < /dev/null &
  echo $! > "$D/server_pid"
  for i in $(seq 100); do [ -s "$D/port" ] && break; sleep 0.2; done
  setsid nohup taskset -c 6-15 "$D/dist/run.sh" tensorcompute-soak --target="127.0.0.1:$(cat $D/port)" \
    --server_pid="$(cat $D/server_pid)" --clients=64 --seconds=$S --print_seconds=60 \
    --json="$D/soak.json" > "$D/soak.log" 2>&1 < /dev/null &
else
  setsid nohup "$D/dist/run.sh" tensorcompute-soak --server_binary="$D/dist/bin/tensorcompute-server" \
    --backend=cuda --clients=64 --seconds=$S --print_seconds=60 \
    --json="$D/soak.json" > "$D/soak.log" 2>&1 < /dev/null &
fi
echo $! > "$D/pid"
echo "soak pid $(cat $D/pid) started $(date -u +%T)"
sleep 40
cat "$D/soak.log"
