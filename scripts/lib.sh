# Shared helpers for scripts/run-sample and scripts/test (sourced, not executed).
ensure_venv() {
  # ensure_venv [EXTRA]: create .venv if needed and install the package (with an optional extra) into it.
  local extra=${1:-}
  local spec="."
  [ -n "$extra" ] && spec=".[$extra]"
  if [ ! -x .venv/bin/python ]; then
    if ! python3 -c 'import ensurepip, venv' 2>/dev/null && command -v apt-get >/dev/null 2>&1; then
      # Debian ships venv/ensurepip in a separate package
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
    python3 -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
  fi
  local stamp=".venv/.installed-${extra:-base}"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    # constraints.txt: the exact versions CI tested (scripts/freeze-constraints writes it)
    .venv/bin/python -m pip install -q -c constraints.txt -e "$spec"
    touch "$stamp"
  fi
}
