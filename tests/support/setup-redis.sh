#!/usr/bin/env bash
# Start a real Redis 7 (Debian 12 package) on 127.0.0.1:16379 without systemd, for the service's replica tests
# (tests/service/test_replicas.py) and `bench service --store`. Persistence as docs/operations.md recommends:
# an append-only file fsynced every write, so a restarted Redis keeps every acknowledged batch; noeviction, so a
# full Redis refuses writes instead of dropping sessions. Idempotent: returns at once when it answers. Runs as root.
set -euo pipefail
BASE=${REDIS_CI_DIR:-/tmp/redis-ci}
PORT=${REDIS_CI_PORT:-16379}
export DEBIAN_FRONTEND=noninteractive

if command -v redis-cli >/dev/null 2>&1 && [ "$(redis-cli -p "$PORT" ping 2>/dev/null)" = PONG ]; then
  echo "redis already up"; exit 0
fi

command -v redis-server >/dev/null 2>&1 || {
  [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; }
  apt-get update -qq; apt-get install -y -qq --no-install-recommends redis-server >/dev/null; }

mkdir -p "$BASE"
cat >"$BASE/redis.conf" <<CONF
bind 127.0.0.1
port $PORT
protected-mode yes
dir $BASE
appendonly yes
appendfsync always
save ""
maxmemory 512mb
maxmemory-policy noeviction
daemonize no
CONF
setsid redis-server "$BASE/redis.conf" </dev/null >"$BASE/redis.log" 2>&1 &
echo $! >"$BASE/redis.pid"
for _ in $(seq 100); do [ "$(redis-cli -p "$PORT" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
[ "$(redis-cli -p "$PORT" ping 2>/dev/null)" = PONG ] || { echo "redis did not come up; see $BASE/redis.log" >&2; exit 1; }
echo "redis up on 127.0.0.1:$PORT"
