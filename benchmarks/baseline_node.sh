#!/bin/bash
# One Ray node of a baseline job (run by every task of the baselines' node sruns):
#   baseline_node.sh LAYOUT_DIR
# Execs the `ray start --block` line that baseline_layout.py wrote for this Slurm node
# (SLURMD_NODENAME, never the host name: the emulated nodes share one host), after
# clearing its temp dir, as sf's node wrapper does. With BX_WAIT_GCS=ADDR:PORT a worker
# first waits for the head's GCS port, as sf's node wrapper does (baseline_ray_alone).
# Nothing else: no retries.
set -euo pipefail
dir="$1"
node="${SLURMD_NODENAME:?not inside a Slurm step}"
mapfile -t argv <"$dir/argv.$node"
rm -rf "$(cat "$dir/temp.$node")"
if [[ -n "${BX_WAIT_GCS:-}" ]] && ! printf '%s\n' "${argv[@]}" | grep -qx -- --head; then
  until (exec 3<>"/dev/tcp/${BX_WAIT_GCS%:*}/${BX_WAIT_GCS##*:}") 2>/dev/null; do sleep 0.2; done
fi
echo "$(date +%s.%N) start $node" >>"$dir/node_starts"
export RAY_USAGE_STATS_ENABLED=0
exec "${argv[@]}"
