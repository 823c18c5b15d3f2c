#!/usr/bin/env bash
# Start a real Prometheus 2.42 (Debian 12 package) on 127.0.0.1:19090 without systemd, backfilled with the
# dcgm-exporter style series written by prometheus_backfill.py (a fixed 2026-06-01 window with a Xid 79 on
# gpu-p02). Idempotent: returns at once when Prometheus is ready and holds the backfill. Runs as root.
set -euo pipefail
BASE=${PROM_CI_DIR:-/tmp/prom-ci}
URL=http://127.0.0.1:19090
HERE=$(cd "$(dirname "$0")" && pwd)
export DEBIAN_FRONTEND=noninteractive

has_backfill() {   # the latest family too: a server holding an older backfill is rebuilt
  curl -sf "$URL/api/v1/query?query=count(DCGM_FI_DEV_XID_ERRORS)&time=2026-06-01T10:00:00Z" 2>/dev/null |
    grep -q '"value":\[[0-9.]*,"8"\]' &&
  curl -sf "$URL/api/v1/query?query=count(node_uname_info)&time=2026-06-01T10:00:00Z" 2>/dev/null |
    grep -q '"value":\[[0-9.]*,"2"\]'
}
if curl -sf "$URL/-/ready" >/dev/null 2>&1 && has_backfill; then echo "prometheus already up"; exit 0; fi

dpkg -s prometheus >/dev/null 2>&1 || {
  [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; }
  apt-get update -qq; apt-get install -y -qq --no-install-recommends prometheus curl >/dev/null; }

# a stale server without the backfill: stop it (by its pidfile) and start over
if [ -f "$BASE/prometheus.pid" ]; then
  kill "$(cat "$BASE/prometheus.pid")" 2>/dev/null || true
  for _ in $(seq 50); do curl -sf "$URL/-/ready" >/dev/null 2>&1 || break; sleep 0.1; done
fi
rm -rf "$BASE/data"; mkdir -p "$BASE/data"
python3 "$HERE/prometheus_backfill.py" "$BASE/backfill.om"
# backfill before starting: blocks dropped into a running server appear only at its next reload
promtool tsdb create-blocks-from openmetrics "$BASE/backfill.om" "$BASE/data" -q >/dev/null

cat >"$BASE/prometheus.yml" <<'CONF'
global:
  scrape_interval: 15s
scrape_configs: []
CONF
promtool check config "$BASE/prometheus.yml" >/dev/null
# the retention must cover the backfilled window, or startup compaction deletes the blocks
setsid prometheus --config.file="$BASE/prometheus.yml" --storage.tsdb.path="$BASE/data" \
  --storage.tsdb.retention.time=3650d --web.listen-address=127.0.0.1:19090 \
  </dev/null >"$BASE/prometheus.log" 2>&1 &
echo $! >"$BASE/prometheus.pid"
for _ in $(seq 100); do curl -sf "$URL/-/ready" >/dev/null 2>&1 && break; sleep 0.1; done
for _ in $(seq 100); do has_backfill && break; sleep 0.1; done
has_backfill || { echo "prometheus did not come up with the backfill; see $BASE/prometheus.log" >&2; exit 1; }
echo "prometheus up on $URL"
