# Shared helpers for scripts/run-sample and scripts/test (sourced, not executed).
ensure_venv() {
  # ensure_venv [EXTRA]: create .venv if needed and install the package (with an optional extra) into it.
  local extra=${1:-}
  local spec="."
  [ -n "$extra" ] && spec=".[$extra]"
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
  fi
  local stamp=".venv/.installed-${extra:-base}"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q -e "$spec"
    touch "$stamp"
  fi
}
