#!/usr/bin/env bash
# Start a real single-host Slurm 22.05 cluster (Debian 12 packages) without systemd, for tests/blueprint:
# munged + a private MariaDB (127.0.0.1:13306) + slurmdbd + slurmctld + two slurmd (node1, node2).
# Idempotent: returns at once when the cluster already answers. Runs as root (scripts/test calls it).
# Everything lives under $SLURM_CI_DIR (default /tmp/slurm-ci); tests use SLURM_CONF=$SLURM_CI_DIR/slurm.conf.
set -euo pipefail
BASE=${SLURM_CI_DIR:-/tmp/slurm-ci}
export SLURM_CONF=$BASE/slurm.conf
export DEBIAN_FRONTEND=noninteractive

nodes_usable() {   # both nodes answer (idle, mixed, allocated, planned, completing: not down/drained)
  [ "$(sinfo -h -N -o '%T' 2>/dev/null | grep -cvE '^(down|drain|fail|unk|not_resp)')" = 2 ]
}
cluster_up() {
  [ -f "$SLURM_CONF" ] && scontrol ping >/dev/null 2>&1 && sacctmgr -n show cluster >/dev/null 2>&1 && nodes_usable
}
if command -v scontrol >/dev/null 2>&1 && cluster_up; then echo "slurm already up"; exit 0; fi

PKGS="munge slurmctld slurmd slurm-client slurmdbd mariadb-server"
if ! dpkg -s $PKGS >/dev/null 2>&1; then
  # keep package postinst scripts from starting daemons (there is no init system here)
  [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; }
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $PKGS >/dev/null
fi
H=$(hostname -s)
mkdir -p "$BASE"/{state,spool,log,out,db}

# munge (the Debian postinst generated /etc/munge/munge.key)
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  install -d -o munge -g munge -m 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi

# private MariaDB; socket, pid and log must live where the mysql user can write (the datadir)
chown mysql:mysql "$BASE/db"
if [ ! -d "$BASE/db/mysql" ]; then
  mariadb-install-db --user=mysql --datadir="$BASE/db" --auth-root-authentication-method=normal \
    --skip-test-db >"$BASE/log/mariadb-install-db.log" 2>&1
fi
if ! mariadb-admin --socket="$BASE/db/mysqld.sock" -uroot ping >/dev/null 2>&1; then
  setsid mariadbd --no-defaults --user=mysql --datadir="$BASE/db" --socket="$BASE/db/mysqld.sock" \
    --pid-file="$BASE/db/mysqld.pid" --port=13306 --bind-address=127.0.0.1 \
    --log-error="$BASE/db/mariadb.err" --innodb-buffer-pool-size=64M </dev/null >/dev/null 2>&1 &
  for _ in $(seq 100); do mariadb-admin --socket="$BASE/db/mysqld.sock" -uroot ping >/dev/null 2>&1 && break; sleep 0.1; done
fi
mariadb --socket="$BASE/db/mysqld.sock" -uroot -e "
  CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"

cat >"$SLURM_CONF" <<CONF
ClusterName=ci
SlurmctldHost=$H(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldPidFile=$BASE/slurmctld.pid
SlurmdPidFile=$BASE/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=16819
JobCompType=jobcomp/filetxt
JobCompLoc=$BASE/log/jobcomp.txt
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=3600
KillWait=5
NodeName=node1 NodeHostname=$H NodeAddr=127.0.0.1 Port=16831 CPUs=2 RealMemory=2000 State=UNKNOWN
NodeName=node2 NodeHostname=$H NodeAddr=127.0.0.1 Port=16832 CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP
CONF

cat >"$BASE/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=$H
DbdAddr=127.0.0.1
DbdPort=16819
SlurmUser=root
LogFile=$BASE/log/slurmdbd.log
PidFile=$BASE/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=13306
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
CONF
chmod 600 "$BASE/slurmdbd.conf"   # slurmdbd refuses a world-readable config

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$(cat "$1")/status"; }
alive "$BASE/slurmdbd.pid" || slurmdbd
for _ in $(seq 100); do sacctmgr -n show cluster >/dev/null 2>&1 && break; sleep 0.1; done
sacctmgr -i add cluster ci >/dev/null 2>&1 || true   # 'already exists' on restart is fine
scontrol ping >/dev/null 2>&1 || slurmctld
for _ in $(seq 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
for n in node1 node2; do alive "$BASE/slurmd-$n.pid" || slurmd -N "$n"; done
for _ in $(seq 200); do
  nodes_usable && break
  scontrol update nodename=node[1-2] state=resume >/dev/null 2>&1 || true
  sleep 0.1
done
cluster_up || { echo "slurm did not come up; see $BASE/log" >&2; sinfo -N >&2 || true; exit 1; }
echo "slurm up: export SLURM_CONF=$SLURM_CONF"
