#!/bin/bash
# N emulated Slurm nodes on one host, for the scale benchmark (benchmarks/scale.py; rl.sh
# stage `scale` on the 16-core GPU machine), from Debian 12's slurm 22.05 debs unpacked with
# dpkg -x (no apt there):
#
#   source benchmarks/gpu/slurm_n_up.sh DEBS_DIR PREFIX STATE_DIR N     # up (fresh every time)
#   slurm_n_down STATE_DIR                                              # stop it (by pid)
#
# Nodes n1..nN in partition `all` (default), each advertising the host's CPUs
# (SLURM_N_CPUS to change it; SlurmdParameters=config_overrides lets a node claim CPUs the
# host shares with the others, as the dev cluster does) and 4 fake GPUs: sf asks at least
# one GPU a node, and Slurm hands each step indices 0-3 from gres.conf File= entries that are
# links to /dev/null (a character device: Slurm refuses regular files; links need no mknod).
# One slurmd per node (`slurmd -N nK`, NodeHostname=localhost, its own Port), %n in the
# spool, pid and log paths. Everything (config, spool, logs, pids) lives in STATE_DIR and the
# ports are not slurm2_up.sh's (controller SLURM_N_PORT, default 6917; node k 17100+k), so
# it stands beside the kit's two-node Slurm. No accounting (no slurmdbd): sf reads job states
# from squeue then. Ray gives node k the loopback address 127.0.0.(10+k) (site
# ray.node_address method loopback), hence at most 244 nodes.
# Exports PATH, LD_LIBRARY_PATH and SLURM_CONF (STATE_DIR/etc/slurm.conf) for the caller;
# returns non-zero unless all N nodes are idle.
DEBS=${1:?debs dir}
SP=${2:?prefix}
SN_STATE=${3:?state dir}
SN_NODES=${4:?node count}
SN_PORT=${SLURM_N_PORT:-6917}
# shellcheck source=slurm_base.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm_base.sh"

# slurm_n_down STATE_DIR: stop the slurmctld and slurmds started from STATE_DIR (their pid
# files), nothing else
slurm_n_down() {
  local pid f
  for f in "$1"/run/*.pid; do
    [[ -s "$f" ]] || continue
    pid=$(cat "$f")
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == slurm* ]] && kill "$pid" 2>/dev/null
  done
  for _ in $(seq 100); do
    local alive=0
    for f in "$1"/run/*.pid; do
      [[ -s "$f" ]] && [[ "$(cat "/proc/$(cat "$f")/comm" 2>/dev/null)" == slurm* ]] && alive=1
    done
    ((alive)) || break
    sleep 0.1
  done
  rm -f "$1"/run/*.pid
}

sn_t0=$(date +%s.%N)
slurm_base || { return 1 2>/dev/null || exit 1; }
slurm_n_down "$SN_STATE"  # a cluster of another size from an earlier call
rm -rf "$SN_STATE/spool"  # and its jobs: job ids start again from 1
mkdir -p "$SN_STATE"/{etc,spool/ctld,log,run,dev}
for k in $(seq "$SN_NODES"); do mkdir -p "$SN_STATE/spool/n$k"; done
for k in 0 1 2 3; do ln -sfn /dev/null "$SN_STATE/dev/nvidia$k"; done
SN_CPUS=${SLURM_N_CPUS:-$(nproc)}
export SLURM_CONF=$SN_STATE/etc/slurm.conf
{
cat <<EOF
# Written by benchmarks/gpu/slurm_n_up.sh: $SN_NODES emulated nodes of $SN_CPUS CPUs.
ClusterName=sfscale
SlurmctldHost=localhost
SlurmctldPort=$SN_PORT
StateSaveLocation=$SN_STATE/spool/ctld
SlurmdSpoolDir=$SN_STATE/spool/%n
SlurmctldPidFile=$SN_STATE/run/slurmctld.pid
SlurmdPidFile=$SN_STATE/run/slurmd-%n.pid
SlurmctldLogFile=$SN_STATE/log/slurmctld.log
SlurmdLogFile=$SN_STATE/log/slurmd-%n.log
MaxJobCount=100000
SlurmdTimeout=120
MessageTimeout=30
EOF
kit_slurm_conf shared
for k in $(seq "$SN_NODES"); do
  echo "NodeName=n$k NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((17100 + k)) CPUs=$SN_CPUS RealMemory=8000 Gres=gpu:4 State=UNKNOWN"
done
echo "PartitionName=all Nodes=n[1-$SN_NODES] Default=YES MaxTime=INFINITE State=UP"
} >"$SLURM_CONF"
printf 'AutoDetect=off\nNodeName=n[1-%s] Name=gpu File=%s/dev/nvidia[0-3]\n' "$SN_NODES" "$SN_STATE" >"$SN_STATE/etc/gres.conf"
if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
  printf 'CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n' >"$SN_STATE/etc/cgroup.conf"
else
  printf 'CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n' >"$SN_STATE/etc/cgroup.conf"
fi
# the daemons run in / (a removed working directory would be every job step's) and in their
# own sessions (a device command's background processes die with it otherwise)
(cd / && setsid slurmctld </dev/null >>"$SN_STATE/log/slurmctld.out" 2>&1)
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.1; done
for k in $(seq "$SN_NODES"); do (cd / && setsid slurmd -N "n$k" </dev/null >>"$SN_STATE/log/slurmd.out" 2>&1); done
sn_idle() { sinfo -h -N -p all -o '%N %T' 2>/dev/null | sort -u | grep -cE ' idle$'; }
for _ in $(seq 600); do [[ $(sn_idle) -ge $SN_NODES ]] && break; sleep 0.2; done
sn_t1=$(date +%s.%N)
echo "slurm: $(sn_idle)/$SN_NODES nodes idle in partition all, $SN_CPUS CPUs each (up in $(awk "BEGIN{printf \"%.1f\", $sn_t1 - $sn_t0}") s; $SLURM_CONF)"
[[ $(sn_idle) -ge $SN_NODES ]]
