#!/bin/bash
# Two emulated Slurm nodes on one GPU host (kind nvidia-h200-x2), one real H200 each, from
# Debian 12's slurm 22.05 debs unpacked with dpkg -x (no apt there):
#
#   n1 = /dev/nvidia0, partition train (default);  n2 = /dev/nvidia1, partition teach;
#   partition pair = both (for a 2x1 job).
#
#   GPU_FIX=1 source benchmarks/gpu/slurm2_up.sh DEBS_DIR PREFIX
#
# Several slurmd on one host: NodeHostname=localhost, one Port per node, %n in the spool,
# pid and log paths, `slurmd -N NAME`. The GPU trap: with task/none Slurm 22.05 tells each
# node's step the GPU's index *within its node*, so n2's step gets CUDA_VISIBLE_DEVICES=0
# although its card is /dev/nvidia1: both "nodes" would train on GPU 0. GPU_FIX=1 (default)
# adds a TaskProlog that shifts n2's indices to the host's numbering; GPU_FIX=0 leaves the
# trap in place (sf's GPU check must then refuse the job, naming n1 and n2).
# AuthInfo=cred_expire=10: a requeued job may start again 10 s after it ended (default 120).
DEBS=${1:?debs dir}
SP=${2:?prefix}
GPU_FIX=${GPU_FIX:-1}
# shellcheck source=slurm_base.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm_base.sh"

t0=$(date +%s.%N)
slurm_base || { return 1 2>/dev/null || exit 1; }

NODELINE=$(slurmd -C 2>/dev/null | grep '^NodeName=' | head -1)
CPUS=$(echo "$NODELINE" | grep -o 'CPUs=[0-9]*' | cut -d= -f2); CPUS=${CPUS:-$(nproc)}
MEM=$(echo "$NODELINE" | grep -o 'RealMemory=[0-9]*' | cut -d= -f2); MEM=${MEM:-16000}
NCPU=$((CPUS / 2)); NMEM=$((MEM * 4 / 10))
# a one-GPU machine: n1 only, with all the host's CPUs (half of 16 starved verl 0.9.1's v1
# trainer: its 8 TransferQueue storage actors took every CPU and no GPU worker could start);
# GPU_SHARE=1 there: n1 and n2 both, each claiming all the CPUs and GPU 0 (/dev/nvidia0 in both
# nodes' gres.conf lines), for the disaggregated modes' one-GPU run (rl.sh stage disagg1)
GPU1=/dev/nvidia1
NODES="1 2"
if [[ ! -e /dev/nvidia1 ]]; then
  NCPU=$CPUS; NMEM=$((MEM * 8 / 10))
  if [[ ${GPU_SHARE:-0} == 1 || ${GPU_SHARE:-0} == 3 ]]; then GPU1=/dev/nvidia0; GPU_FIX=0; else NODES=1; fi
  # GPU_SHARE=3: n3 too (GPU 0 again), partition sweep = n2 + n3: a 2-point sweep's array
  # tasks run side by side beside a run on n1 (rl.sh stage learn, issue 34)
  [[ ${GPU_SHARE:-0} == 3 ]] && NODES="1 2 3"
fi
GPU_SHARED=0; [[ $GPU1 == /dev/nvidia0 ]] && GPU_SHARED=1
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd/n1 /var/spool/slurmd/n2 /var/spool/slurmd/n3 /var/log/slurm
cat >/etc/slurm/taskprolog.sh <<'EOF'
#!/bin/sh
# n2's card is the host's GPU 1: shift the node-local indices Slurm hands its steps.
if [ "$SLURMD_NODENAME" = n2 ] && [ -n "$CUDA_VISIBLE_DEVICES" ]; then
  echo "export CUDA_VISIBLE_DEVICES=$(echo "$CUDA_VISIBLE_DEVICES" | awk -F, '{for(i=1;i<=NF;i++) printf "%s%d", (i>1?",":""), $i+1}')"
fi
EOF
# GPU_SHARE: n1's and n2's processes hold the same card, and NCCL refuses two ranks of one
# communicator on one GPU of one host ("Duplicate GPU detected"); a host id per node makes
# them two hosts to NCCL (it then talks over sockets), as on two real nodes.
cat >/etc/slurm/taskprolog-share.sh <<'EOF'
#!/bin/sh
echo "export NCCL_HOSTID=sfkit-$SLURMD_NODENAME"
EOF
chmod 755 /etc/slurm/taskprolog.sh /etc/slurm/taskprolog-share.sh
{
cat <<EOF
ClusterName=sfgpu2
SlurmctldHost=$HOST
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SlurmdTimeout=60
MessageTimeout=10
EOF
kit_slurm_conf shared
[[ $GPU_FIX == 1 ]] && echo "TaskProlog=/etc/slurm/taskprolog.sh"
[[ $GPU_SHARED == 1 ]] && echo "TaskProlog=/etc/slurm/taskprolog-share.sh"
for k in $NODES; do
  echo "NodeName=n$k NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((17000 + k)) CPUs=$NCPU RealMemory=$NMEM Gres=gpu:1 State=UNKNOWN"
done
echo "PartitionName=train Nodes=n1 Default=YES MaxTime=INFINITE State=UP"
[[ $NODES == 1 ]] || { echo "PartitionName=teach Nodes=n2 MaxTime=INFINITE State=UP"
echo "PartitionName=pair Nodes=n[1-2] MaxTime=INFINITE State=UP"; }
[[ $NODES == "1 2 3" ]] && { echo "PartitionName=sweep Nodes=n[2-3] MaxTime=INFINITE State=UP"
# n3 alone: the container lane's run (rl.sh stage container) beside the hang lane on n2
echo "PartitionName=box Nodes=n3 MaxTime=INFINITE State=UP"; }
} >/etc/slurm/slurm.conf
# nvidia_gpu_env: only CUDA_VISIBLE_DEVICES in the steps (sf drops ROCR_VISIBLE_DEVICES anyway).
printf 'AutoDetect=off\nNodeName=n1 Name=gpu File=/dev/nvidia0 Flags=nvidia_gpu_env\nNodeName=n2 Name=gpu File=%s Flags=nvidia_gpu_env\n' "$GPU1" >/etc/slurm/gres.conf
[[ $NODES == "1 2 3" ]] && echo 'NodeName=n3 Name=gpu File=/dev/nvidia0 Flags=nvidia_gpu_env' >>/etc/slurm/gres.conf
printf 'CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n' >/etc/slurm/cgroup.conf

if pgrep -x slurmctld >/dev/null; then scontrol reconfigure; else setsid slurmctld </dev/null; fi
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.1; done
for k in $NODES; do pgrep -f "slurmd -N n$k" >/dev/null || setsid slurmd -N n$k </dev/null; done
for _ in $(seq 150); do
  [[ $(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u | grep -cE ' (idle|mix|alloc)$') -ge $(wc -w <<<"$NODES") ]] && break; sleep 0.2
done
t1=$(date +%s.%N)
echo "slurm (GPU_FIX=$GPU_FIX): $(sinfo -h -N -o '%N %P %T %c %G' 2>&1 | tr '\n' ';') (up in $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s)"
[[ $(sinfo -h -N -o '%N %T' | sort -u | grep -cE ' (idle|mix|alloc)$') -ge $(wc -w <<<"$NODES") ]]
