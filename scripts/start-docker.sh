#!/usr/bin/env bash
# Starts dockerd in the background if no daemon answers, and waits (at most 60 s) until it does.
# Prints nothing and exits 0 when a daemon already runs; exits 1 if none can be started.
set -uo pipefail
docker info >/dev/null 2>&1 && exit 0
if ! command -v dockerd >/dev/null; then
  echo "[docker] dockerd is not installed (apt-get install docker.io)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "[docker] no daemon answers and starting one needs root" >&2
  exit 1
fi
log=${DOCKERD_LOG:-/tmp/skyrl-dockerd.log}
echo "[docker] starting dockerd (log: $log)"
nohup setsid dockerd >"$log" 2>&1 </dev/null &
for _ in $(seq 1 120); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 0.5
done
echo "[docker] dockerd did not come up within 60 s; last lines of $log:" >&2
tail -20 "$log" >&2
exit 1
