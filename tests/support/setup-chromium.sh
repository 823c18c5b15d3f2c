#!/usr/bin/env bash
# Debian's Chromium for the dashboard's browser tests (Playwright drives /usr/bin/chromium; `playwright install`
# cannot download browsers here). Idempotent: does nothing when it is already installed. Runs as root.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || true)"; exit 0; fi
export DEBIAN_FRONTEND=noninteractive
[ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; }
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium >/dev/null
/usr/bin/chromium --version
