#!/bin/bash
# What every Slurm of the GPU kits needs before and in its slurm.conf (sourced by slurm_up.sh,
# slurm2_up.sh and slurm_n_up.sh, with DEBS and SP set): Debian 12's slurm 22.05 debs unpacked
# with dpkg -x into SP (once), the *-wlm names and /usr/sbin/slurmstepd linked, the host name
# on 127.0.0.1, munged running (--force as root), cgroup v2 controllers enabled for
# system.slice (else slurmd fails "Could not create scope directory"). Exports PATH,
# LD_LIBRARY_PATH and SLURM_CONF for the caller. Returns non-zero when a deb fails to unpack.
# On a host that already runs Slurm (the dev box, where slurm_n_up.sh is tried in a namespace
# of its own) it leaves the installed slurmstepd, a munged that answers, and cgroup v1 alone.
# kit_slurm_conf (below) prints the slurm.conf lines the three have in common.
mkdir -p "$SP"
export PATH="$SP/usr/bin:$SP/usr/sbin:$PATH"
export LD_LIBRARY_PATH="$SP/usr/lib/x86_64-linux-gnu:$SP/usr/lib/x86_64-linux-gnu/slurm-wlm:$SP/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SLURM_CONF=/etc/slurm/slurm.conf
slurm_base() {
  if [[ ! -x "$SP/usr/sbin/slurmd-wlm" ]]; then
    for d in "$DEBS"/*.deb; do dpkg -x "$d" "$SP" || { echo "dpkg -x $d failed"; return 1; }; done
  fi
  for n in slurmd slurmctld slurmstepd; do ln -sf "$SP/usr/sbin/$n-wlm" "$SP/usr/sbin/$n"; done
  # slurmd runs the slurmstepd compiled into it (/usr/sbin); an installed one is the same 22.05
  [[ -e /usr/sbin/slurmstepd ]] || ln -s "$SP/usr/sbin/slurmstepd-wlm" /usr/sbin/slurmstepd
  HOST=$(hostname -s)
  grep -qE "^127\.0\.0\.1.*[[:space:]]$HOST([[:space:]]|\$)" /etc/hosts || echo "127.0.0.1 $HOST" >>/etc/hosts
  slurm_munge
  # cgroup v2 only (the GPU machine); a v1 host's slurmd needs none of this
  [[ -f /sys/fs/cgroup/cgroup.controllers ]] || return 0
  mkdir -p /sys/fs/cgroup/system.slice
  for c in +cpuset +cpu +memory; do
    echo "$c" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    echo "$c" >/sys/fs/cgroup/system.slice/cgroup.subtree_control 2>/dev/null || true
  done
}
# slurm_munge: a munged on the default socket (every daemon and client of the host uses that
# one); one that already answers is used as it is, key and all
slurm_munge() {
  munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
  mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
  [[ -s /etc/munge/munge.key ]] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  chmod 400 /etc/munge/munge.key; chmod 700 /etc/munge /var/lib/munge /var/log/munge; chmod 755 /run/munge
  pgrep -x munged >/dev/null || setsid munged --force </dev/null
  for _ in $(seq 50); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
}

# kit_slurm_conf [shared]: the slurm.conf lines every Slurm of the GPU kits has (munge auth,
# the debs' plugins, root daemons, no cgroups, no accounting, cons_tres with GPUs, quick
# timeouts); each script adds its cluster name, paths, timeouts and nodes. `shared`: also what
# the kits with several slurmds on one host add: nodes may claim CPUs the host shares
# (config_overrides), a quick backfill, requeue, and a requeued job may start again 10 s after
# it ended (cred_expire; default 120).
kit_slurm_conf() {
  cat <<EOF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
PluginDir=$SP/usr/lib/x86_64-linux-gnu/slurm-wlm
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmctldTimeout=30
InactiveLimit=0
KillWait=10
MinJobAge=900
Waittime=0
EOF
  [[ "${1:-}" == shared ]] || return 0
  cat <<EOF
AuthInfo=cred_expire=10
SlurmdParameters=config_overrides
SchedulerParameters=bf_interval=1,sched_interval=2
JobRequeue=1
EOF
}
