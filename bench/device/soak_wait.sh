#!/usr/bin/env bash
# On the device: wait for the soak soak_start.sh began, then hand back its log and JSON (and
# stop a server started apart).
set -u
D=/tmp/tcsoak
pid=$(cat "$D/pid" 2>/dev/null || echo 0)
echo "waiting for soak pid $pid at $(date -u +%T)"
if [ "$pid" = 0 ] || ! kill -0 "$pid" 2>/dev/null; then echo "soak process not running"; fi
end=$(( $(date +%s) + ${WAIT_LIMIT:-580} ))
while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
echo "done waiting at $(date -u +%T); running: $(kill -0 "$pid" 2>/dev/null && echo yes || echo no)"
if [ -s "$D/server_pid" ]; then kill -TERM "$(cat $D/server_pid)"; sleep 3; tail -3 "$D/server.log"; fi
cp "$D/soak.log" "$D/soak.json" "$OUT/" 2>/dev/null
cat "$D/soak.log"
