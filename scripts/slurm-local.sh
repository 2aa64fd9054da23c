#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for testing `joule sweep --slurm`:
# Debian's slurm-wlm daemons (slurmctld + slurmd) and munge, all on localhost, with every
# file (config, state, spool, logs) in one folder.
#
#   scripts/slurm-local.sh start DIR   # installs slurmctld slurmd slurm-client munge with apt-get
#                                      # when missing (needs root), starts the daemons, waits
#                                      # for the node; the last line is `export SLURM_CONF=...`
#   scripts/slurm-local.sh stop DIR    # stops what `start` started
#
# Slurm commands find this cluster through SLURM_CONF=DIR/slurm.conf. Ports 16817/16818.
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
cmd=$1
dir=$(realpath -m "$2")
conf=$dir/slurm.conf

stop_pid_file() {
    local f=$1
    [[ -f $f ]] || return 0
    local pid
    pid=$(cat "$f")
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

case $cmd in
start)
    if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
        || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
        if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
            echo "slurm-local: needs slurmctld, slurmd, slurm-client and munge (Debian: apt-get install slurmctld slurmd slurm-client munge)" >&2
            exit 1
        fi
        echo "slurm-local: installing slurmctld slurmd slurm-client munge" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            slurmctld slurmd slurm-client munge >&2
    fi
    [[ $(id -u) -eq 0 ]] || { echo "slurm-local: the daemons run as root; run as root" >&2; exit 1; }
    mkdir -p "$dir"/{state,spool,log}

    # munge: the key comes with Debian's package; start munged unless one answers already.
    if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        [[ -f /etc/munge/munge.key ]] || mungekey --create >&2
        mkdir -p /run/munge
        chown munge:munge /run/munge
        runuser -u munge -- /usr/sbin/munged
        cp /run/munge/munged.pid "$dir/munged.pid"
        for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
    fi

    host=$(hostname -s)
    cpus=$(nproc)
    mem=$(awk '/MemTotal/ { m = int($2 / 1024) - 1024; print (m > 512 ? m : 512) }' /proc/meminfo)
    cat >"$conf" <<EOF
ClusterName=joule-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=5
MinJobAge=300
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF=$conf
    slurmctld -f "$conf"
    slurmd -f "$conf"
    # Wait (at most 60 s) for the node to take jobs.
    for _ in $(seq 120); do
        state=$(sinfo -h -N -o '%t' 2>/dev/null | head -1 || true)
        [[ $state == idle* || $state == mix* || $state == alloc* ]] && break
        sleep 0.5
    done
    if [[ ! ${state:-} =~ ^(idle|mix|alloc) ]]; then
        echo "slurm-local: the node did not come up (state '${state:-none}'); logs in $dir/log" >&2
        tail -20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
        exit 1
    fi
    echo "slurm-local: cluster up (node $host, $cpus CPUs)" >&2
    echo "export SLURM_CONF=$conf"
    ;;
stop)
    stop_pid_file "$dir/slurmd.pid"
    stop_pid_file "$dir/slurmctld.pid"
    stop_pid_file "$dir/munged.pid"
    ;;
*)
    usage
    ;;
esac
