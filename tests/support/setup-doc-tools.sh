#!/usr/bin/env bash
# curl and jq, which the worked examples in docs/service.md use (tests/service/test_doc_examples.py runs them).
# Runs as root, like the other setup scripts.
set -euo pipefail
command -v curl >/dev/null && command -v jq >/dev/null && exit 0
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends curl jq >/dev/null
