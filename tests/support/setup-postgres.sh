#!/usr/bin/env bash
# Start a private PostgreSQL (Debian 12's 15) on 127.0.0.1:15432 without systemd: a cluster initdb'd into
# $PG_CI_DIR (default /tmp/pg-ci), run by the `postgres` OS user (the server refuses to run as root), with
#   role firstfault / password firstfault (CREATEDB; the Blueprint's writer; tests make a database each, and
#     end the reader's connections to show the dashboard opens new ones: pg_signal_backend),
#   role firstfault_reader / password firstfault_reader (SELECT on what firstfault creates: the dashboard's),
#   database firstfault.
# DSN: postgresql://firstfault:firstfault@127.0.0.1:15432/firstfault. Idempotent: returns at once when the
# server answers as firstfault. Runs as root.
set -euo pipefail
BASE=${PG_CI_DIR:-/tmp/pg-ci}
PORT=15432
export DEBIAN_FRONTEND=noninteractive PGCONNECT_TIMEOUT=5

ready() { PGPASSWORD=firstfault psql -qtA -h 127.0.0.1 -p "$PORT" -U firstfault -d firstfault -c 'SELECT 1' \
            >/dev/null 2>&1; }
signal_granted() { PGPASSWORD=firstfault psql -qtA -h 127.0.0.1 -p "$PORT" -U firstfault -d firstfault -c \
  "SELECT pg_has_role('pg_signal_backend', 'MEMBER')" 2>/dev/null | grep -q t; }
if command -v psql >/dev/null && ready && signal_granted; then echo "postgresql already up"; exit 0; fi

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
if [ -z "$(bindir)" ] || ! command -v psql >/dev/null; then
  # the package starts no cluster of its own under policy-rc.d; its `main` cluster is left unused
  [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; }
  apt-get update -qq; apt-get install -y -qq --no-install-recommends postgresql postgresql-client >/dev/null
fi
BIN=$(bindir)
id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/sh postgres
as_pg() { runuser -u postgres -- "$@"; }

mkdir -p "$BASE"; chown postgres: "$BASE"; chmod 700 "$BASE"
# a cluster left by a previous run: stop it if its server still runs, start it again if its data is whole
if [ -f "$BASE/data/PG_VERSION" ]; then
  as_pg "$BIN/pg_ctl" -D "$BASE/data" -m fast stop >/dev/null 2>&1 || true
else
  rm -rf "$BASE/data"
  printf 'firstfault\n' >"$BASE/pwfile"; chown postgres: "$BASE/pwfile"
  as_pg "$BIN/initdb" -D "$BASE/data" -U postgres --pwfile="$BASE/pwfile" --auth-local=peer \
    --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >"$BASE/initdb.log" 2>&1 ||
    { cat "$BASE/initdb.log" >&2; exit 1; }
  rm -f "$BASE/pwfile"
  cat >>"$BASE/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$BASE'
max_connections = 100
shared_buffers = 64MB
CONF
fi
as_pg "$BIN/pg_ctl" -D "$BASE/data" -l "$BASE/postgresql.log" -w -t 60 start >/dev/null ||
  { tail -20 "$BASE/postgresql.log" >&2; exit 1; }

as_pg psql -qtA -h "$BASE" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
SELECT 'CREATE ROLE firstfault LOGIN CREATEDB' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'firstfault') \gexec
SELECT 'CREATE ROLE firstfault_reader LOGIN' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'firstfault_reader') \gexec
ALTER ROLE firstfault PASSWORD 'firstfault';
ALTER ROLE firstfault_reader PASSWORD 'firstfault_reader';
SELECT 'GRANT pg_signal_backend TO firstfault' WHERE NOT pg_has_role('firstfault', 'pg_signal_backend', 'MEMBER') \gexec
SELECT 'CREATE DATABASE firstfault OWNER firstfault' WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'firstfault') \gexec
SQL
# what the writer creates, the reader may read (in every database the writer creates from now on, too)
as_pg psql -qtA -h "$BASE" -p "$PORT" -U postgres -d template1 -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
ALTER DEFAULT PRIVILEGES FOR ROLE firstfault IN SCHEMA public GRANT SELECT ON TABLES TO firstfault_reader;
GRANT CREATE ON SCHEMA public TO firstfault;
SQL
as_pg psql -qtA -h "$BASE" -p "$PORT" -U postgres -d firstfault -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
ALTER DEFAULT PRIVILEGES FOR ROLE firstfault IN SCHEMA public GRANT SELECT ON TABLES TO firstfault_reader;
GRANT CREATE ON SCHEMA public TO firstfault;
SQL
for _ in $(seq 50); do ready && break; sleep 0.1; done
ready || { echo "postgresql did not come up; see $BASE/postgresql.log" >&2; exit 1; }
echo "postgresql up on 127.0.0.1:$PORT"
