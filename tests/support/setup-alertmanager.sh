#!/usr/bin/env bash
# Start a real Alertmanager 0.25 (Debian 12's prometheus-alertmanager) on 127.0.0.1:19093 without systemd, for
# the Alertmanager output's tests (tests/blueprint/test_alert_outputs.py). Clustering is off (no gossip port).
# Its route sends firstfault's alerts, one group per alert, to a webhook on 127.0.0.1:19094 that the tests open
# while they run (send_resolved on), so a test sees Alertmanager's own firing and resolved notifications.
# Idempotent: returns at once when this Alertmanager is up with this config. Runs as root.
set -euo pipefail
BASE=${ALERTMANAGER_CI_DIR:-/tmp/alertmanager-ci}
URL=http://127.0.0.1:19093
export DEBIAN_FRONTEND=noninteractive

has_config() {
  curl -sf "$URL/api/v2/status" 2>/dev/null | grep -q 'firstfault-test-webhook'
}
if curl -sf "$URL/-/ready" >/dev/null 2>&1 && has_config; then echo "alertmanager already up"; exit 0; fi

{ dpkg -s prometheus-alertmanager >/dev/null 2>&1 && command -v curl >/dev/null; } || {
  [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; }
  apt-get update -qq; apt-get install -y -qq --no-install-recommends prometheus-alertmanager curl >/dev/null; }

# a stale server (another config): stop it by its pidfile and start over
if [ -f "$BASE/alertmanager.pid" ]; then
  kill "$(cat "$BASE/alertmanager.pid")" 2>/dev/null || true
  for _ in $(seq 50); do curl -sf "$URL/-/ready" >/dev/null 2>&1 || break; sleep 0.1; done
fi
rm -rf "$BASE/data"; mkdir -p "$BASE/data"

cat >"$BASE/alertmanager.yml" <<'CONF'
route:
  receiver: discard
  routes:
    - matchers: ['alertname="FirstfaultInfrastructureFault"']
      receiver: firstfault-test-webhook
      group_by: ['...']
      group_wait: 1s
      group_interval: 1s
      repeat_interval: 4h
receivers:
  - name: discard
  - name: firstfault-test-webhook
    webhook_configs:
      - url: http://127.0.0.1:19094/alertmanager
        send_resolved: true
CONF
amtool check-config "$BASE/alertmanager.yml" >/dev/null

setsid /usr/bin/prometheus-alertmanager --config.file="$BASE/alertmanager.yml" --storage.path="$BASE/data" \
  --web.listen-address=127.0.0.1:19093 --cluster.listen-address= \
  </dev/null >"$BASE/alertmanager.log" 2>&1 &
echo $! >"$BASE/alertmanager.pid"
for _ in $(seq 100); do curl -sf "$URL/-/ready" >/dev/null 2>&1 && break; sleep 0.1; done
has_config || { echo "alertmanager did not come up; see $BASE/alertmanager.log" >&2; exit 1; }
echo "alertmanager up on $URL"
