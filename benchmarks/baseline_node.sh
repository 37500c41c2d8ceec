#!/bin/bash
# One Ray node of a baseline job (run by every task of the baselines' node sruns):
#   baseline_node.sh LAYOUT_DIR
# Execs the `ray start --block` line that baseline_layout.py wrote for this Slurm node
# (SLURMD_NODENAME, never the host name: the emulated nodes share one host), after
# clearing its temp dir, as sf's node wrapper does. Nothing else: no waiting, no retries.
set -euo pipefail
dir="$1"
node="${SLURMD_NODENAME:?not inside a Slurm step}"
mapfile -t argv <"$dir/argv.$node"
rm -rf "$(cat "$dir/temp.$node")"
echo "$(date +%s.%N) start $node" >>"$dir/node_starts"
export RAY_USAGE_STATS_ENABLED=0
exec "${argv[@]}"
