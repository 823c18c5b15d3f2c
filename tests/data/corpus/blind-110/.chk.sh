#!/bin/bash
for u in "$@"; do if grep -qiF "$u" /work/batches/used_sources.txt /work/batches/claimed_sources.txt; then echo "TAKEN $u"; else echo "FREE  $u"; fi; done
