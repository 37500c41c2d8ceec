#!/bin/bash
# A one-node Slurm on the GPU machine, from Debian 12's slurm 22.05 debs unpacked with
# dpkg -x (no apt there). The real GPU is GRES gpu:1 (/dev/nvidia0).
#
#   source benchmarks/gpu/slurm_up.sh DEBS_DIR PREFIX
#
# Idempotent: a second call on a warm machine only re-exports PATH/LD_LIBRARY_PATH when the
# daemons already answer. Daemons start in their own sessions and outlive the command.
# Traps handled as ../shared/reference/gpu-machine-facts.md says: munged --force, the
# *-wlm names linked, /usr/sbin/slurmstepd linked, cgroup v2 controllers enabled for
# system.slice, proctrack/linuxproc + task/none, no accounting, host name on 127.0.0.1.

DEBS=${1:?debs dir}
SP=${2:?prefix}
# shellcheck source=slurm_base.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm_base.sh"

if scontrol ping 2>/dev/null | grep -q UP && sinfo -h -o %T 2>/dev/null | grep -qE 'idle|mix|alloc'; then
  echo "slurm: already up"
  return 0 2>/dev/null || exit 0
fi

t0=$(date +%s.%N)
slurm_base || { return 1 2>/dev/null || exit 1; }

mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
NODELINE=$(slurmd -C 2>/dev/null | grep '^NodeName=' | head -1)
CPUS=$(echo "$NODELINE" | grep -o 'CPUs=[0-9]*' | cut -d= -f2); CPUS=${CPUS:-$(nproc)}
MEM=$(echo "$NODELINE" | grep -o 'RealMemory=[0-9]*' | cut -d= -f2); MEM=${MEM:-16000}
MEM=$((MEM * 8 / 10))
TOPO=$(echo "$NODELINE" | grep -oE '(Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=[0-9]+' | tr '\n' ' ')
{
cat <<EOF
ClusterName=sfgpu
SlurmctldHost=$HOST
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmdTimeout=60
EOF
kit_slurm_conf
cat <<EOF
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS $TOPO RealMemory=$MEM Gres=gpu:1 State=UNKNOWN
PartitionName=gpu Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
} >/etc/slurm/slurm.conf
# GRES_FLAGS (default nvidia_gpu_env): with no Flags and AutoDetect=off, Slurm 22.05 sets
# CUDA_VISIBLE_DEVICES *and* ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK, GPU_DEVICE_ORDINAL in
# every GPU step, and verl's Worker refuses ROCR_VISIBLE_DEVICES next to CUDA_VISIBLE_DEVICES
# ("Please don't set ROCR_VISIBLE_DEVICES when HIP/CUDA_VISIBLE_DEVICES is set"). An NVIDIA
# site with AutoDetect=nvml gets nvidia_gpu_env implicitly. GRES_FLAGS= (empty) keeps
# Slurm's default, to test sf against it.
GF=${GRES_FLAGS-nvidia_gpu_env}
cat >/etc/slurm/gres.conf <<EOF
AutoDetect=off
NodeName=$HOST Name=gpu File=/dev/nvidia0${GF:+ Flags=$GF}
EOF
echo "gres.conf: $(tail -1 /etc/slurm/gres.conf)"
cat >/etc/slurm/cgroup.conf <<EOF
CgroupPlugin=cgroup/v2
IgnoreSystemd=yes
EOF

pgrep -x slurmctld >/dev/null || setsid slurmctld </dev/null
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.1; done
pgrep -x slurmd >/dev/null || setsid slurmd </dev/null
for _ in $(seq 150); do sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mix|alloc)' && break; sleep 0.2; done
t1=$(date +%s.%N)
echo "slurm: $(sinfo -h -o "%P %T %N %c %G" 2>&1) (up in $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s)"
sinfo -h -o %T | grep -qE '^(idle|mix|alloc)'
