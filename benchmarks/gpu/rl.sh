#!/bin/bash
# Real verl RL through sf on the GPU machine (kind nvidia-h200-x2, issue 14): GRPO with the
# vLLM rollout on one H200 with a requeue mid-run, the same overrides bare on the other GPU
# at the same time (step-time ratio), sf export of the RL checkpoint, transformers loads and
# generates; GRPO across two Slurm nodes (first with Slurm's GPU-index trap left in place:
# sf must refuse it by name, then with the fix); on-policy distillation as a hetjob with a
# requeue. Everything goes through sf's normal path: site file, runtime registry, sf submit,
# Slurm, sf's own Ray bring-up.
#
# Prepared here with benchmarks/gpu/rl_prepare.sh (carry folders .rlk, .rlb0-3). On the device,
# one command per call, from the repository root:
#
#   bash benchmarks/gpu/rl.sh recv                  # calls 1-3: keep this call's bundle part
#   bash benchmarks/gpu/rl.sh start [STAGES] && bash benchmarks/gpu/rl.sh wait 540
#                                                   # call 4: last part, then the whole chain
#   bash benchmarks/gpu/rl.sh wait 560              # later calls, back to back, until "done"
#
# Session 2 (both step-time orders, the GPU health check, distillation metrics):
#   bash benchmarks/gpu/rl.sh start install slurm assets orders health distill3 summary2
#   (ORDER0=sf-first ORDER1=bare-first before `start`: the same with the orders swapped per GPU)
#
# The scale benchmark (issue 22 item 6, docs/scale.md; kind nvidia-h200, no GPU used): sf's
# Ray bring-up against Ray alone on 1-64 emulated Slurm nodes (slurm_n_up.sh), 3 repetitions,
# no trial started after 10 minutes (SCALE_NODES, SCALE_REPS, SCALE_BUDGET_S before `start`):
#   bash benchmarks/gpu/rl.sh recv                  # calls 1-5: carry .rlb0 ... .rlb4, one each
#   bash benchmarks/gpu/rl.sh start install scale && bash benchmarks/gpu/rl.sh wait 540
#                                                   # call 6: carry .rlb5 and .rlk
# (the disaggregated modes also need cupy: carry .rlc0 and .rlc1 in two more recv calls first)
#   bash benchmarks/gpu/rl.sh wait 560              # until "chain done"; scale.json comes back
#
# `start` runs the stages in the background (setsid; the machine keeps them while it is warm)
# from a private copy of the repository, so later calls may send a changed tree safely.
# `wait N` follows the chain's log for at most N seconds and packs what came back into $OUT.
# STAGES (default): install slurm assets grpo export check metrics trap pair distill summary
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# W (the kit's work folder), BUNDLE (where install unpacks the bundle) and PY (the python the
# bundle is for) are the GPU machine's; a stage tried on another host (the dev box, `scale` in a
# network namespace of its own) gets its own through SF_KIT_W, SF_KIT_BUNDLE and SF_KIT_PY.
W=${SF_KIT_W:-/tmp/sfw}
BUNDLE=${SF_KIT_BUNDLE:-/tmp/site}
L=$W/logs
mkdir -p "$W" "$L" /tmp/chunks
ALL="install slurm assets grpo export check metrics trap pair distill summary"

recv() {  # this call's carried bundle part(s) into /tmp/chunks (kept while the machine is warm)
  for d in "$REPO"/.rlb* "$REPO"/.rlc*; do [[ -d "$d" ]] && cp -n "$d"/* /tmp/chunks/; done
  [[ -d "$REPO/.rlk" ]] && mkdir -p "$W/kit" && cp -rn "$REPO/.rlk"/* "$W/kit/"
  ls -la /tmp/chunks "$W/kit" 2>/dev/null | grep -v '^total'
}

pack() {  # what came back so far, into $OUT (at most 8 files)
  [[ -n "${OUT:-}" ]] || return 0
  cp "$L/chain.log" "$OUT/chain.log" 2>/dev/null
  cp "$L/results.json" "$OUT/results.json" 2>/dev/null
  cp "$L/results2.json" "$OUT/results2.json" 2>/dev/null
  cp "$L/results-disagg.json" "$OUT/results-disagg.json" 2>/dev/null
  cp "$L/results-heal.json" "$OUT/results-heal.json" 2>/dev/null
  cp "$L/results-learn.json" "$OUT/results-learn.json" 2>/dev/null
  cp "$L/hang-stacks.txt" "$OUT/hang-stacks.txt" 2>/dev/null
  cp "$L/ct-lane.log" "$OUT/ct-lane.log" 2>/dev/null
  cp "$L/scale.json" "$OUT/scale.json" 2>/dev/null
  cp "$L"/*.png "$OUT/" 2>/dev/null
  { find "$L" -type f ! -name '*.png' -size -8M; find "$W/runs" -type f \( -path '*/logs/*' -o -name '*.json*' \
      -o -name '*.txt' -o -name '*.sbatch' -o -name reason -o -name '*.yaml' \) ! -path '*/checkpoints/*' \
      ! -path '*/exports/*' -size -4M 2>/dev/null; find "$W"/runs/*/exports -maxdepth 2 -name '*.json' 2>/dev/null
    find /var/log/slurm "$W/scale/slurm/log" -type f 2>/dev/null
    find "$W/scale/work" \( -name events.jsonl -o -name reason -o -name 'slurm-*.out' -o -name times \) -size -4M 2>/dev/null
  } | sort -u >"$W/tarlist.txt"
  tar czf "$OUT/logs.tgz" -P -T "$W/tarlist.txt" 2>/dev/null
  ls -la "$OUT" | tail -n +2
}

case "${1:-}" in
  recv) recv; exit 0 ;;
  start)
    recv
    shift
    rm -rf "$W/repo" && mkdir -p "$W/repo"
    if [[ -f "$REPO/.sfsnap/repo.tgz" ]]; then
      # a snapshot of the commit tested here, made before the calls with `mkdir -p .sfsnap &&
      # git archive HEAD | gzip >.sfsnap/repo.tgz && git rev-parse HEAD >.sfsnap/commit` (carry
      # .sfsnap): the working tree that travels also holds other engineers' unfinished edits
      tar -C "$W/repo" -xzf "$REPO/.sfsnap/repo.tgz" && echo "repository: snapshot $(cat "$REPO/.sfsnap/commit" 2>/dev/null)"
    else
      tar -C "$REPO" --exclude='./.rlb*' --exclude='./.rlc*' --exclude=./.git -cf - . | tar -C "$W/repo" -xf -
    fi
    rm -f "$L/chain.done" "$L/chain.log"
    setsid nohup env STAGES="${*:-$ALL}" bash "$W/repo/benchmarks/gpu/rl.sh" chain >"$L/chain.log" 2>&1 </dev/null &
    echo "chain started (pid $!): ${*:-$ALL}"; exit 0 ;;
  wait)
    t_end=$(( $(date +%s) + ${2:-540} ))
    tail -n +1 -f "$L/chain.log" --pid=$$ 2>/dev/null &
    TAIL=$!
    while [[ ! -f "$L/chain.done" ]] && (( $(date +%s) < t_end )); do sleep 2; done
    kill $TAIL 2>/dev/null
    [[ -f "$L/chain.done" ]] && echo "=== chain done" || echo "=== chain still running"
    pack; exit 0 ;;
  chain) ;;
  *) echo "usage: rl.sh recv | start [STAGES] | wait SECONDS" >&2; exit 2 ;;
esac

# ------------------------------------------------------------------ the chain (background)
STAGES=" $STAGES "
T0=$(date +%s)
stage() { echo; echo "=== [$(date -u +%H:%M:%S) +$(( $(date +%s) - T0 ))s] $*"; }
want() { [[ "$STAGES" == *" $1 "* ]]; }
note() { echo "$(date -u +%H:%M:%S) $*" >>"$L/notes.txt"; echo "NOTE: $*"; }
trap 'touch "$L/chain.done"' EXIT
HERE=$REPO/benchmarks/gpu
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${SF_KIT_PY:-$(command -v python3)}
A=$W/assets
SITE=$W/site.yaml
REG=$W/runtimes.yaml

if want install; then
  stage "install: bundle -> $BUNDLE, TransferQueue, sf"
  if [[ ! -f "$BUNDLE"/.sf-bundle-done ]]; then
    cat /tmp/chunks/bundle.part.0* >/tmp/bundle.tar.xz
    want_sha=$(cut -d' ' -f1 "$W/kit/bundle.sha256"); got=$(sha256sum /tmp/bundle.tar.xz | cut -d' ' -f1)
    echo "sha256 want=$want_sha got=$got"
    [[ "$want_sha" == "$got" ]] || { note "bundle sha256 mismatch (parts: $(ls /tmp/chunks | tr '\n' ' '))"; exit 3; }
    # tar reads gzip or xz; without an xz binary there, Python's lzma module does it
    rm -rf "$BUNDLE" && mkdir -p "$BUNDLE" && { tar -C "$BUNDLE" -xf /tmp/bundle.tar.xz ||
      $PY -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' /tmp/bundle.tar.xz "$BUNDLE"; } ||
      { note "untar failed"; exit 3; }
    rm -f /tmp/bundle.tar.xz
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$BUNDLE" "$W"/kit/transferqueue-*.whl 2>&1 | grep -v WARNING
    touch "$BUNDLE"/.sf-bundle-done
  fi
  # py-spy: sf's hang watchdog saves every process's stacks with it (launcher/injob/stacks.py).
  # Not `pip install --target`: the bundle already has a bin/ (ray's, vllm's scripts), and pip
  # then skips the wheel's scripts with a WARNING ("Target directory .../bin already exists")
  # that the grep above hid: parts 6-7 had no py-spy. The wheel holds one static binary.
  if [[ ! -x "$BUNDLE/bin/py-spy" ]] && compgen -G "$W/kit/py_spy-*.whl" >/dev/null; then
    mkdir -p "$BUNDLE/bin"
    $PY -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); n = [i for i in z.namelist() if i.endswith(".data/scripts/py-spy")][0]; open(sys.argv[2], "wb").write(z.read(n))' \
      "$(ls "$W"/kit/py_spy-*.whl | head -1)" "$BUNDLE/bin/py-spy" && chmod 755 "$BUNDLE/bin/py-spy"
  fi
  if [[ -x "$BUNDLE/bin/py-spy" ]]; then
    # can it read a process here (ptrace rights in this container)? one sleeping python, dumped
    $PY -c 'import time; time.sleep(30)' & SLEEPER=$!; sleep 1
    echo "py-spy: $("$BUNDLE/bin/py-spy" --version 2>&1); dump of a sleeping python:"
    timeout 20 "$BUNDLE/bin/py-spy" dump --pid $SLEEPER 2>&1 | head -6
    kill $SLEEPER 2>/dev/null
  else note "py-spy: no binary in $BUNDLE/bin (no wheel in the kit?)"; fi
  # cupy (carried in parts, .rlc*): verl 0.9.1's nccl checkpoint engine, the weight sync of
  # the disaggregated modes, imports it (checkpoint_engine/nccl_checkpoint_engine.py)
  if [[ ! -f "$BUNDLE"/.sf-cupy-done ]] && compgen -G "/tmp/chunks/cupy.part.*" >/dev/null; then
    whl=$W/kit/$(cat "$W/kit/cupy.name"); cat /tmp/chunks/cupy.part.* >"$whl"
    want_sha=$(cut -d' ' -f1 "$W/kit/cupy.sha256"); got=$(sha256sum "$whl" | cut -d' ' -f1)
    if [[ "$want_sha" == "$got" ]]; then
      $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$BUNDLE" "$whl" \
        "$W"/kit/cuda_pathfinder-*.whl 2>&1 | grep -v WARNING
      touch "$BUNDLE"/.sf-cupy-done
    else note "cupy wheel sha256 mismatch (parts: $(ls /tmp/chunks | tr '\n' ' '))"; fi
  fi
  echo "site: $(du -sh "$BUNDLE" | cut -f1)"
fi
export PYTHONPATH="$BUNDLE"
# sf itself: the repository copy on PYTHONPATH of a wrapper (the job finds it the same way)
mkdir -p "$W/bin"
printf '#!/bin/sh\nPYTHONPATH=%s:%s exec %s -m launcher.cli.app "$@"\n' "$REPO" "$BUNDLE" "$PY" >"$W/bin/sf"
chmod +x "$W/bin/sf"
# the runtime: a venv-shaped folder around the image's python (the registry entry adds the bundle)
RT=$W/rt; mkdir -p "$RT/bin"
printf '#!/bin/sh\nexec %s "$@"\n' "$PY" >"$RT/bin/python"; chmod +x "$RT/bin/python"
printf 'export PATH=%s:%s:$PATH\n' "$RT/bin" "$(dirname "$PY")" >"$RT/bin/activate"
[[ -x "$BUNDLE"/bin/py-spy ]] && ln -sf "$BUNDLE"/bin/py-spy "$RT/bin/py-spy"
export PATH="$W/bin:$PATH"
want install && { $PY -c "import sys; sys.path[:0]=['$BUNDLE']; import ray, verl, vllm, transfer_queue; print('ray', ray.__version__, 'verl', verl.__version__, 'vllm', vllm.__version__)" 2>&1 | tail -1
  nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader | tee "$L/gpus.txt"
  $PY -c "import sys; sys.path[:0]=['$BUNDLE']; import torch, cupy; from cupy.cuda import nccl
print('cupy', cupy.__version__, 'nccl', nccl.get_version() if nccl.available else 'NOT available')" 2>&1 | tail -1; }

slurm_up() { GPU_FIX=$1 source "$HERE/slurm2_up.sh" "$W/kit/debs" "$W/slurm"; }
if want slurm; then
  stage "slurm: two nodes, n1 = GPU 0 (train), n2 = GPU 1 (teach), pair = both"
  slurm_up 1 || note "slurm did not come up"
elif [[ -n "$(tr ' ' '\n' <<<"$STAGES" | grep -vxE 'install|scale|summary2?|')" ]]; then
  slurm_up 1 >/dev/null 2>&1  # a later call's stages on the Slurm an earlier call started
fi
CPUS=$(sinfo -h -N -o %c 2>/dev/null | head -1); CPUS=${CPUS:-16}
sed -e "s#@RUNS@#$W/runs#; s#@REG@#$REG#; s#@CPUS@#$CPUS#" "$HERE/rl-site.yaml" >"$SITE"
sed -e "s#@RT@#$RT#; s#/tmp/site#$BUNDLE#" "$HERE/rl-runtimes.yaml" >"$REG"
export SF_SITE=$SITE
EXP=$W/exp; mkdir -p "$EXP/experiments"; cp -r "$HERE"/rl-experiments/* "$EXP/experiments/"

# -- issue 22 item 6: the scale benchmark (benchmarks/scale.py, docs/scale.md) on this host's
# 16 cores, kind nvidia-h200, the bundle only (no GPU is used):
#   bash benchmarks/gpu/rl.sh start install scale && bash benchmarks/gpu/rl.sh wait 540
# sf's Ray bring-up against Ray alone on SCALE_NODES emulated nodes (slurm_n_up.sh: one slurmd
# per node, partition all, 4 fake GPUs a node), SCALE_REPS repetitions; no trial starts after
# SCALE_BUDGET_S seconds, so the stage ends within about 15 minutes of device time with what
# it has (results: $L/scale.json, the tables: $L/scale-table.md). SCALE_BESIDE=1 runs it beside
# the GPU stages instead, from the end of `assets` (the host's CPUs then serve both: the
# figures say so), its own Slurm and its own port range (scale-site.yaml) beside the kit's.
# SCALE_ONCE=ray:64: that trial in the first repetition only (Ray alone cannot come up there);
# SCALE_METHODS=sf: sf alone (a repetition of sf's trials).
SCALE_NODES=${SCALE_NODES:-1,4,8,16,32,64}; SCALE_REPS=${SCALE_REPS:-3}; SCALE_BUDGET_S=${SCALE_BUDGET_S:-600}
scale_lane() {
  stage "scale: sf vs Ray alone, N=$SCALE_NODES, $SCALE_REPS reps, no trial after ${SCALE_BUDGET_S}s"
  (  # a subshell: its SLURM_CONF and PATH stay out of later stages
    SW=$W/scale
    largest=$(tr ',' '\n' <<<"$SCALE_NODES" | sort -n | tail -1)
    # shellcheck source=slurm_n_up.sh
    source "$HERE/slurm_n_up.sh" "$W/kit/debs" "$W/slurm" "$SW/slurm" "$largest" || { note "scale: slurm did not come up"; exit 1; }
    # The runtime once more, with an nvidia-smi that fails: the nodes' GPUs are fake, and the
    # host's real one would name its one H200 behind every node's index 0, so sf's GPU check
    # would refuse every job of two nodes or more (shared card). Without it sf counts Slurm's.
    RTS=$W/rt-scale; rm -rf "$RTS"; mkdir -p "$RTS/bin"
    printf '#!/bin/sh\nexec %s "$@"\n' "$PY" >"$RTS/bin/python"
    cat >"$RTS/bin/nvidia-smi" <<'STUB'
#!/bin/sh
echo "nvidia-smi: the scale benchmark's nodes have fake GPUs" >&2
exit 9
STUB
    chmod +x "$RTS/bin/python" "$RTS/bin/nvidia-smi"
    printf 'export PATH=%s:%s:$PATH\n' "$RTS/bin" "$(dirname "$PY")" >"$RTS/bin/activate"
    sed -e "s#@RT@#$RTS#; s#/tmp/site#$BUNDLE#" "$HERE/rl-runtimes.yaml" >"$SW/runtimes.yaml"
    sed -e "s#@RUNS@#$SW/runs#; s#@REG@#$SW/runtimes.yaml#; s#@CPUS@#$(nproc)#; s#@TEMP@#/tmp#" \
      "$HERE/scale-site.yaml" >"$SW/site.yaml"
    $PY "$REPO/benchmarks/scale.py" --site "$SW/site.yaml" --sf "$W/bin/sf" --work "$SW/work" --out "$L/scale.json" \
      --nodes "$SCALE_NODES" --reps "$SCALE_REPS" --budget-s "$SCALE_BUDGET_S" --once "${SCALE_ONCE:-}" --methods "${SCALE_METHODS:-sf,ray}" 2>&1 >"$L/scale-table.md" | tee "$L/scale.log"
    echo "scale.py exited ${PIPESTATUS[0]}"
    $PY "$REPO/benchmarks/scale.py" --fit "$L/scale.json" | tee "$L/scale-table.md"
    slurm_n_down "$SW/slurm"
  )
}
if want assets; then
  stage "assets: tiny Qwen2 student (76.5 M) and teacher (10.1 M, same tokenizer), RL prompts, reward"
  [[ -f $A/tiny/model/config.json ]] || $PY "$HERE/make_tiny.py" --out "$A/tiny" --train 64 --val 64 | tail -1
  [[ -f $A/teacher/model/config.json ]] || $PY "$HERE/make_tiny.py" --out "$A/teacher" --train 64 --val 16 \
    --hidden 512 --layers 4 --heads 8 --kv-heads 4 --intermediate 1024 | tail -1
  cmp -s "$A/tiny/model/tokenizer.json" "$A/teacher/model/tokenizer.json" || note "student and teacher tokenizers differ"
  $PY "$HERE/rl_data.py" "$A/rl" --train 256 --val 16
  cp "$HERE/reward_tiny.py" "$A/reward_tiny.py"
fi

if want scale && [[ -n "${SCALE_BESIDE:-}" ]]; then
  scale_lane >"$L/scale-lane.log" 2>&1 &
  SCALE_PID=$!
fi

run_id_of() { grep -oE '"run": *"[^"]+"' "$1" | head -1 | sed 's/.*"\([^"]*\)"$/\1/'; }
job_of() { grep -oE '"job_id": *"[0-9]+"' "$1" | head -1 | grep -oE '[0-9]+'; }
# requeue_at RUNDIR STEP: send the wall-time signal to the batch shell once STEP is logged
requeue_at() {
  local dir=$1 step=$2 job
  for _ in $(seq 900); do
    # a trainer row (it has timing_s/step): fully async's rollouter logs rows of its own
    if grep -E "^\{\"step\":$step," "$dir"/metrics/attempt-0.jsonl 2>/dev/null | grep -q '"timing_s/step"'; then
      job=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(str((r.get('job_ids') or [r.get('job_id')])[-1]).split('+')[0])" "$dir/record.json" 2>/dev/null)
      echo "[requeue] step $step logged: scancel --signal=USR1 --batch ${job}"; scancel --signal=USR1 --batch "$job"
      return 0
    fi
    sleep 0.5
  done
  echo "[requeue] step $step never appeared in $dir/metrics/attempt-0.jsonl"
}
# sf_submit TAG EXPERIMENT [ARGS]: sf submit --wait --json, the requeue watcher when REQUEUE_AT is set
sf_submit() {
  local tag=$1 exp=$2; shift 2
  local before; before=$(ls -d "$W"/runs/"$exp"-* 2>/dev/null)
  (cd "$EXP" && sf submit "$exp" "$@" --wait --json >"$L/$tag-submit.json" 2>"$L/$tag-submit.err") &
  local pid=$! dir=""
  for _ in $(seq 120); do  # the run dir this submit created
    dir=$(ls -d "$W"/runs/"$exp"-* 2>/dev/null | grep -vxF -f <(echo "$before") | head -1)
    [[ -n "$dir" ]] && break; sleep 0.5
  done
  echo "$dir" >"$L/$tag-run-dir.txt"; echo "$tag: run dir $dir"
  [[ -n "${REQUEUE_AT:-}" && -n "$dir" ]] && requeue_at "$dir" "$REQUEUE_AT" &
  wait $pid; local rc=$?
  echo "$tag: sf submit --wait exited $rc"; tail -3 "$L/$tag-submit.err"
  [[ -n "$dir" ]] && { cat "$dir/reason" 2>/dev/null; sf status "$(basename "$dir")" 2>&1 | tail -3; }
  return $rc
}
# bare TAG RUNDIR GPU: the sf run's overrides, bare verl main_ppo (its own ray.init()) on GPU
bare() {
  local tag=$1 dir=$2 gpu=$3 B=$W/$1
  rm -rf "$B"; mkdir -p "$B"
  mapfile -t OVR <"$dir/overrides.txt"
  for i in "${!OVR[@]}"; do
    case "${OVR[$i]}" in
      trainer.default_local_dir=*) OVR[$i]="trainer.default_local_dir=$B/checkpoints" ;;
      trainer.experiment_name=*) OVR[$i]="trainer.experiment_name=$tag" ;;
    esac
  done
  printf '%s\n' "${OVR[@]}" >"$L/$tag-overrides.txt"
  (cd "$B" && env CUDA_VISIBLE_DEVICES=$gpu VERL_FILE_LOGGER_PATH="$L/$tag-metrics.jsonl" PYTHONPATH="$BUNDLE" \
     VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 RAY_DEDUP_LOGS=0 TOKENIZERS_PARALLELISM=false \
     timeout 900 $PY -m verl.trainer.main_ppo "${OVR[@]}" >"$L/$tag-train.log" 2>&1)
  echo "$tag: bare verl exited $?"
}

GRPO_DIR=""
if want grpo; then
  stage "grpo: sf submit tiny-grpo --profile h200:1 (n1, GPU 0), USR1 after step 6; bare on GPU 1 once sf's overrides exist"
  rm -f "$L/grpo.stop"
  # wall stamps of each logged step (submit -> first step), both runs the same way
  $PY "$HERE/steptimes.py" watch "$W/runs/tiny-grpo-*/metrics/attempt-0.jsonl" "$L/grpo-stamps.jsonl" --stop "$L/grpo.stop" &
  $PY "$HERE/steptimes.py" watch "$L/bare-metrics.jsonl" "$L/bare-stamps.jsonl" --stop "$L/grpo.stop" &
  s0=$(date +%s); echo "$s0" >"$L/grpo-t0.txt"
  REQUEUE_AT=6 sf_submit grpo tiny-grpo --profile h200:1 &
  SFPID=$!
  for _ in $(seq 240); do d=$(cat "$L/grpo-run-dir.txt" 2>/dev/null); [[ -n "$d" && -f "$d/overrides.txt" ]] && break; sleep 0.5; done
  GRPO_DIR=$(cat "$L/grpo-run-dir.txt" 2>/dev/null)
  date +%s >"$L/bare-t0.txt"
  [[ -f "$GRPO_DIR/overrides.txt" ]] && bare bare "$GRPO_DIR" 1 &
  BAREPID=$!
  wait $SFPID; echo "grpo: submit to end $(( $(date +%s) - s0 )) s"
  wait $BAREPID
  touch "$L/grpo.stop"
fi
GRPO_DIR=${GRPO_DIR:-$(cat "$L/grpo-run-dir.txt" 2>/dev/null)}
RUN=$(basename "${GRPO_DIR:-none}")

if want export && [[ -n "$GRPO_DIR" ]]; then
  stage "export: sf export $RUN --checkpoint-format verl-fsdp (a Slurm job)"
  (cd "$EXP" && sf export "$RUN" --checkpoint-format verl-fsdp 2>&1) | tee "$L/export.txt"
  for _ in $(seq 360); do compgen -G "$GRPO_DIR/exports/*/config.json" >/dev/null && break; sleep 0.5; done
  squeue 2>&1 | tail -3
  ls -la "$GRPO_DIR"/exports/* 2>&1 | tee -a "$L/export.txt"
fi
if want check && [[ -n "$GRPO_DIR" ]]; then
  E=$(ls -d "$GRPO_DIR"/exports/* 2>/dev/null | sort -V | tail -1)
  stage "check: transformers loads $E and generates"
  [[ -n "$E" ]] && timeout 180 $PY "$HERE/export_check.py" "$E" --base "$A/tiny/model" --val "$A/tiny/data/val.parquet" \
    --out "$L/export_check.json" 2>&1 | tail -12 || note "no export to check"
fi
if want metrics && [[ -n "$GRPO_DIR" ]]; then
  stage "metrics: sf metrics / sf plot $RUN"
  (cd "$EXP" && sf metrics "$RUN" 2>&1 | tail -20 && sf plot "$RUN" -o "$L/grpo.png" 2>&1 | tail -2)
fi

if want trap; then
  stage "trap: two nodes, Slurm's GPU-index trap left in place (n2 told CUDA_VISIBLE_DEVICES=0): sf must refuse"
  slurm_up 0 | tail -1
  timeout 60 srun -l -p pair -N2 -n2 --ntasks-per-node=1 --gres=gpu:1 sh -c 'echo "$SLURMD_NODENAME CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"' 2>&1 | tee "$L/trap-srun.txt"
  sf_submit trap tiny-grpo --profile h200-pair:2x1 --set total_training_steps=2
  slurm_up 1 | tail -1
  timeout 60 srun -l -p pair -N2 -n2 --ntasks-per-node=1 --gres=gpu:1 sh -c 'echo "$SLURMD_NODENAME CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"' 2>&1 | tee "$L/fix-srun.txt"
fi
if want pair; then
  stage "pair: GRPO across two Slurm nodes (h200-pair:2x1), 10 steps, GPU check on"
  s0=$(date +%s)
  sf_submit pair tiny-grpo --profile h200-pair:2x1 --set total_training_steps=10
  echo "pair: submit to end $(( $(date +%s) - s0 )) s"
fi
if want distill; then
  stage "distill: hetjob, student on n1 (train), teacher on n2 (teach), USR1 after step 5"
  s0=$(date +%s)
  REQUEUE_AT=5 sf_submit distill tiny-distill
  echo "distill: submit to end $(( $(date +%s) - s0 )) s"
  D=$(cat "$L/distill-run-dir.txt" 2>/dev/null)
  [[ -n "$D" ]] && (cd "$EXP" && sf metrics "$(basename "$D")" 2>&1 | tail -20 && sf plot "$(basename "$D")" -o "$L/distill.png" 2>&1 | tail -2)
fi
# -- session 2 (issue 14 leftovers): both orders, the GPU health check, distillation metrics --
OSTEPS=${OSTEPS:-10}
# lane GPU SERIES ORDER: on one GPU (and its Slurm node), the sf run and the bare run of the
# same overrides one after the other; ORDER bare-first or sf-first. The two lanes run side by
# side, so each run has the other lane's run beside it on the other GPU in both orders.
lane() {
  local g=$1 series=$2 order=$3 exp=tiny-grpo-$1 dry=$W/dry-tiny-grpo-$1
  rm -rf "$EXP/experiments/$exp" && cp -r "$EXP/experiments/tiny-grpo" "$EXP/experiments/$exp"
  mkdir -p "$dry"
  # the overrides sf would send (the dry run is what submit sends, modulo the run id)
  (cd "$EXP" && sf submit "$exp" --profile "$series:1" --set total_training_steps="$OSTEPS" --dry-run --json) \
    >"$L/o$g-dry.json" 2>"$L/o$g-dry.err"
  $PY -c 'import json,sys; t=open(sys.argv[1]).read(); print("\n".join(json.loads(t[t.index("{"):])["overrides"]))' \
    "$L/o$g-dry.json" >"$dry/overrides.txt" || { note "lane $g: no dry-run overrides"; return 1; }
  $PY "$HERE/steptimes.py" watch "$W/runs/$exp-*/metrics/attempt-0.jsonl" "$L/o$g-sf-stamps.jsonl" --stop "$L/orders.stop" &
  $PY "$HERE/steptimes.py" watch "$L/o$g-bare-metrics.jsonl" "$L/o$g-bare-stamps.jsonl" --stop "$L/orders.stop" &
  one_sf() { date +%s >"$L/o$g-sf-t0.txt"; sf_submit "o$g-sf" "$exp" --profile "$series:1" --set total_training_steps="$OSTEPS"; }
  one_bare() { date +%s >"$L/o$g-bare-t0.txt"; bare "o$g-bare" "$dry" "$g"; }
  if [[ $order == bare-first ]]; then one_bare; one_sf; else one_sf; one_bare; fi
  echo "$order" >"$L/o$g-order.txt"
}
if want orders; then
  stage "orders: GPU 0 (n1) ${ORDER0:-bare-first}, GPU 1 (n2) ${ORDER1:-sf-first}, $OSTEPS steps each, the lanes side by side"
  rm -f "$L/orders.stop"
  lane 0 h200 "${ORDER0:-bare-first}" >"$L/lane0.log" 2>&1 &
  LANE0=$!
  lane 1 h200-teach "${ORDER1:-sf-first}" >"$L/lane1.log" 2>&1 &
  LANE1=$!
  wait $LANE0; wait $LANE1
  touch "$L/orders.stop"
  tail -n 6 "$L/lane0.log" "$L/lane1.log"
fi
if want health; then
  stage "health: preflight over n1 + n2 (object transfers, a GEMM per GPU, NCCL all-reduce over both GPUs)"
  sf_submit health-pre tiny-grpo --profile h200-pair:2x1 --preflight
  D=$(cat "$L/health-pre-run-dir.txt" 2>/dev/null)
  [[ -n "$D" ]] && $PY -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])).get("health"), indent=1))' \
    "$D/preflight.json" 2>&1 | tee "$L/health-pre.json"
  stage "health before the driver: --exclude-bad-nodes (test driver in place of verl)"
  SF_TEST_DRIVER="exit 0" sf_submit health-job tiny-grpo --profile h200-pair:2x1 --exclude-bad-nodes
  D=$(cat "$L/health-job-run-dir.txt" 2>/dev/null)
  [[ -n "$D" ]] && grep '"health_checked"' "$D/events.jsonl" | tee "$L/health-job.json"
fi
if want distill3; then
  stage "distill3: the hetjob for 3 steps; sf metrics must show actor/distillation/loss by default"
  sf_submit distill3 tiny-distill --set total_training_steps=3
  D=$(cat "$L/distill3-run-dir.txt" 2>/dev/null)
  [[ -n "$D" ]] && (cd "$EXP" && sf metrics "$(basename "$D")" 2>&1 | tail -12 | tee "$L/distill3-metrics.txt" \
    && sf plot "$(basename "$D")" -o "$L/distill3.png" 2>&1 | tail -2)
fi
# -- session 3 (issue 23 item 4): the methods that never trained on a GPU, through sf --
MSTEPS=${MSTEPS:-4}
# method_run TAG METHOD ROLLOUT_N: tiny-grpo's experiment with another method, MSTEPS steps on n1
method_run() {
  local tag=$1 method=$2 n=$3 exp=tiny-$1
  rm -rf "$EXP/experiments/$exp" && cp -r "$EXP/experiments/tiny-grpo" "$EXP/experiments/$exp"
  sed -i -e "s#^method: .*#method: $method#" -e "s#^  rollout_n: .*#  rollout_n: $n#" "$EXP/experiments/$exp/config.yaml"
  s0=$(date +%s)
  sf_submit "$tag" "$exp" --profile h200:1 --set total_training_steps="$MSTEPS"
  echo "$tag: submit to end $(( $(date +%s) - s0 )) s"
  local D; D=$(cat "$L/$tag-run-dir.txt" 2>/dev/null)
  [[ -n "$D" ]] && (cd "$EXP" && sf metrics "$(basename "$D")" 2>&1 | tail -12 | tee "$L/$tag-metrics.txt")
  [[ -n "$D" ]] && grep -h adv_estimator "$D/overrides.txt"
}
if want methods; then
  stage "methods: REINFORCE++-baseline and ReMax, $MSTEPS steps each on n1 (GPU 0)"
  method_run rpp verl/reinforce-baseline 4
  method_run remax verl/remax 1
fi
# PPO first: its preflight refusal is short, and the GPU stages after it are long
if want ppo; then
  stage "ppo: verl/ppo --preflight: verl 0.9.1's critic needs flash-attn, which this runtime lacks"
  exp=tiny-ppo
  rm -rf "$EXP/experiments/$exp" && cp -r "$EXP/experiments/tiny-grpo" "$EXP/experiments/$exp"
  sed -i -e "s#^method: .*#method: verl/ppo#" -e "s#^  rollout_n: .*#  rollout_n: 1#" "$EXP/experiments/$exp/config.yaml"
  $PY -c "import flash_attn" 2>&1 | tail -1
  sf_submit ppo "$exp" --profile h200:1 --preflight
fi
# -- session 5 (issue 23 item 4): healing on the GPU, ReMax with its trainer pin, PPO's refusal --
# One GRPO run of HSTEPS steps on n1 (restarts in place allowed twice, the hang limit 60 s):
# verl's training worker SIGKILLed after step HKILL, its trainer loop SIGSTOPped after step
# HSTOP, then (HREQUEUE > 0) today's requeue path by USR1 after step HREQUEUE as the baseline.
HSTEPS=${HSTEPS:-12}; HKILL=${HKILL:-3}; HSTOP=${HSTOP:-6}; HREQUEUE=${HREQUEUE:-9}
# HEAL_BESIDE=1: the heal run as a lane in the background (its log heal-lane.log), so the
# container lane (started later in the chain) runs beside it on its own node
heal_lane() {
  local exp=tiny-heal s0 SFPID D WPID d
  rm -rf "$EXP/experiments/$exp" && cp -r "$EXP/experiments/tiny-grpo" "$EXP/experiments/$exp"
  sed -i -e 's#^slurm: .*#slurm: {time: "00:40:00", max_requeues: 2, hang_timeout_s: 60, first_step_timeout_s: 900, max_restarts_in_place: 2}#' \
    "$EXP/experiments/$exp/config.yaml"
  grep '^slurm:' "$EXP/experiments/$exp/config.yaml"
  rm -f "$L/heal-run-dir.txt"  # an earlier chain's run dir is not this one's
  s0=$(date +%s)
  sf_submit heal "$exp" --profile h200:1 --set total_training_steps="$HSTEPS" &
  SFPID=$!
  for _ in $(seq 240); do d=$(cat "$L/heal-run-dir.txt" 2>/dev/null); [[ -n "$d" ]] && break; sleep 0.5; done
  D=$(cat "$L/heal-run-dir.txt" 2>/dev/null)
  [[ -n "$D" ]] && $PY "$HERE/heal_watch.py" "$D" "$L/results-heal.json" --kill-at "$HKILL" --stop-at "$HSTOP" \
    --requeue-at "$HREQUEUE" --steps "$HSTEPS" --timeout 1700 2>&1 | tee "$L/heal-watch.log" &
  WPID=$!
  wait $SFPID; echo "heal: submit to end $(( $(date +%s) - s0 )) s"
  wait $WPID
  [[ -n "$D" ]] && { ls -la "$D/stacks" "$D"/stacks/* 2>&1 | head -20; (cd "$EXP" && sf logs "$(basename "$D")" --stacks 2>&1 | head -60) >"$L/heal-stacks.txt";
    (cd "$EXP" && sf status "$(basename "$D")" 2>&1 | tail -20); (cd "$EXP" && sf metrics "$(basename "$D")" 2>&1 | tail -16)
    (cd "$EXP" && sf status "$(basename "$D")" --timeline 2>&1 | tail -40); }
}
if want heal; then
  stage "heal: GRPO $HSTEPS steps; SIGKILL WorkerDict after step $HKILL, SIGSTOP TaskRunner after $HSTOP, USR1 after $HREQUEUE"
  if [[ -n "${HEAL_BESIDE:-}" ]]; then heal_lane >"$L/heal-lane.log" 2>&1 & HEAL_LANE_PID=$!; else heal_lane; fi
fi
if want remax; then
  stage "remax: verl/remax (trainer.use_v1 pinned false), $MSTEPS steps on n1"
  method_run remax verl/remax 1
fi
# -- session 4 (issue 24 item 4): disaggregated RL on the two GPUs. Written while one H200 was
# lent, NOT RUN YET. Needs kind nvidia-h200-x2:
#   bash benchmarks/gpu/rl.sh start install slurm assets disagg
#   (DORDER=disagg-first before `start`: the same three runs in the other order)
# Colocated GRPO over both GPUs as two Slurm nodes (tiny-grpo, h200-pair:2x1) against
# one-step-off and fully async with the actor on n1 (GPU 0, train) and the rollout on n2
# (GPU 1, teach), the same data, reward and 32 samples a step; then each disaggregated mode
# again with USR1 after step 5 (the requeue must resume from the last checkpoint).
DSTEPS=${DSTEPS:-12}
# disagg_run TAG EXPERIMENT [ARGS]: one sf run, verl's log lines stamped as they appear
disagg_run() {
  local tag=$1 exp=$2; shift 2
  rm -f "$L/$tag.stop"  # an earlier chain's run of this tag left it: the watcher would stop at once
  $PY "$HERE/steptimes.py" watch "$W/runs/$exp-*/metrics/attempt-0.jsonl" "$L/$tag-stamps.jsonl" --stop "$L/$tag.stop" &
  local s0; s0=$(date +%s)
  sf_submit "$tag" "$exp" "$@"
  echo "$tag: submit to end $(( $(date +%s) - s0 )) s" | tee -a "$L/disagg-times.txt"
  touch "$L/$tag.stop"
}
if want disagg; then
  stage "disagg: colocated GRPO (h200-pair:2x1) vs one-step-off vs fully async (actor n1, rollout n2), $DSTEPS steps, ${DORDER:-sync-first}"
  echo "${DORDER:-sync-first}" >"$L/disagg-order.txt"
  d_sync() { disagg_run d-sync tiny-grpo --profile h200-pair:2x1 --set total_training_steps="$DSTEPS"; }
  d_osp() { disagg_run d-osp tiny-one-step-off --set total_training_steps="$DSTEPS"; }
  d_async() { disagg_run d-async tiny-async --set rollout.total_rollout_steps=$(( DSTEPS * 8 )); }
  if [[ ${DORDER:-sync-first} == sync-first ]]; then d_sync; d_osp; d_async; else d_async; d_osp; d_sync; fi
  stage "disagg requeue: one-step-off and fully async again, USR1 after step 5"
  REQUEUE_AT=5 disagg_run d-osp-rq tiny-one-step-off --set total_training_steps="$DSTEPS"
  REQUEUE_AT=5 disagg_run d-async-rq tiny-async --set rollout.total_rollout_steps=$(( DSTEPS * 8 ))
  $PY "$HERE/disagg_steps.py" --logs "$L" --runs "$W/runs" --out "$L/results-disagg.json" 2>&1 | tail -20
fi
# -- issue 24 item 4 on ONE GPU (kind nvidia-h200; RESULTS.md parts 8-9): what one GPU allows. The two
# Slurm nodes share GPU 0 (GPU_SHARE=1: slurm2_up.sh gives n1 and n2 /dev/nvidia0), so the
# rollout pool (n2, vLLM) and the train pool (n1, FSDP actor) are separate het groups and
# separate Ray nodes as on two GPUs, on one card: the modes' placement, steps and requeue
# resume are real, their throughput is one card's (the pools share it), not two GPUs'. sf's GPU check would
# refuse two nodes on one card by UUID, so these runs use a runtime whose nvidia-smi fails
# (sf then counts Slurm's GPUs: as in the scale stage). From the start, GPU_SHARE=1 and all:
#   GPU_SHARE=1 DSTEPS=10 D1_MODES="async sync osp" bash benchmarks/gpu/rl.sh start install slurm assets disagg1
# (25 minutes on the device in part 9: each mode once with USR1 after step 5, i.e. two verl starts a mode;
# D1_REQUEUE_AT= (empty) halves it). The weight sync is NCCL between the two nodes' processes
# on one card, which NCCL refuses as a duplicate GPU within one host: slurm2_up.sh gives
# each node its own NCCL_HOSTID (a TaskProlog), so NCCL sees two hosts and uses sockets.
if want disagg1; then
  stage "disagg1: one GPU as n1 (train) + n2 (gen): one-step-off and fully async, $DSTEPS steps, USR1 after step 5"
  sinfo -h -N -o '%N %P %T %G' | tr '\n' ';'; echo
  RTG=$W/rt-shared; rm -rf "$RTG"; mkdir -p "$RTG/bin"
  printf '#!/bin/sh\nexec %s "$@"\n' "$PY" >"$RTG/bin/python"
  printf '#!/bin/sh\necho "nvidia-smi: n1 and n2 share GPU 0 in this run (rl.sh disagg1)" >&2\nexit 9\n' >"$RTG/bin/nvidia-smi"
  chmod +x "$RTG/bin/python" "$RTG/bin/nvidia-smi"
  printf 'export PATH=%s:%s:$PATH\n' "$RTG/bin" "$(dirname "$PY")" >"$RTG/bin/activate"
  [[ -x "$BUNDLE"/bin/py-spy ]] && ln -sf "$BUNDLE"/bin/py-spy "$RTG/bin/py-spy"
  sed -e "s#@RT@#$RTG#; s#/tmp/site#$BUNDLE#" "$HERE/rl-runtimes.yaml" >"$W/runtimes-shared.yaml"
  sed -e "s#@RUNS@#$W/runs#; s#@REG@#$W/runtimes-shared.yaml#; s#@CPUS@#$CPUS#" "$HERE/rl-site.yaml" >"$W/site-shared.yaml"
  # D1_MODES: which modes, in order (osp = one-step-off, async = fully async, sync = colocated
  # GRPO on n1 alone: the same card, data and 32 samples a step, never requeued); D1_REQUEUE_AT:
  # the step after which USR1 requeues each disaggregated run (empty: no requeue)
  tags=()
  ( export SF_SITE=$W/site-shared.yaml
    for mode in ${D1_MODES:-osp async}; do
      case $mode in
        osp) REQUEUE_AT=${D1_REQUEUE_AT-5} disagg_run d1-osp tiny-one-step-off --set total_training_steps="$DSTEPS" ;;
        async) REQUEUE_AT=${D1_REQUEUE_AT-5} disagg_run d1-async tiny-async \
                 --set rollout.total_rollout_steps=$(( DSTEPS * 8 )) ;;
        sync) disagg_run d1-sync tiny-grpo --profile h200:1 --set total_training_steps="$DSTEPS" ;;
      esac
    done )
  for mode in ${D1_MODES:-osp async}; do tags+=("d1-$mode"); done
  $PY "$HERE/disagg_steps.py" --logs "$L" --runs "$W/runs" --out "$L/results-disagg.json" \
    --tags "$(IFS=,; echo "${tags[*]}")" 2>&1 | tail -20
fi
# -- issue 32 on the H200: GRPO with the runtime in a container, through Slurm's own OCI path
# (oci.conf + runc, scripts/sf-oci-run as RunTimeRun: what the dev cluster runs in CI). From
# the start, beside the issue 34 lanes (n3 alone: partition box):
#   GPU_SHARE=3 bash benchmarks/gpu/rl.sh start install slurm assets container hang learn
# The image: this machine's own system (Ubuntu 24.04, its Python 3.12 and torch 2.11: no
# registry here, and torch's 4+ GB cannot travel) copied into a tree, the RL bundle put inside
# it at /opt/sf/site; scripts/build-container --rootfs makes the OCI bundle from it. The GPU
# the way NVIDIA's container toolkit gives it: the device nodes (/dev, as enroot binds it) and
# the host driver's libraries (/usr/local/nvidia, its own mount here) bound in read-only; the
# step's GPU index comes from sf-oci-run (Slurm 22.05 leaves CUDA_VISIBLE_DEVICES out of
# container steps). CT_STEPS steps; CT_REQUEUE_AT=N also requeues the run after step N.
CT_STEPS=${CT_STEPS:-5}
container_lane() {
  local CT=$W/ct IMG=$W/ct/image s0 d
  s0=$(date +%s)
  rm -rf "$CT" && mkdir -p "$IMG"
  # the system tree, one filesystem (the driver's /usr/local/nvidia mount stays out: bound
  # at run time); bin, lib, sbin are links into usr on Ubuntu 24.04 and copy as links
  for d in usr etc bin sbin lib lib32 lib64 libx32; do
    [[ -e /$d ]] && cp -a --one-file-system "/$d" "$IMG/"
  done
  # the interpreter's packages where they live outside /usr (a venv or /opt prefix)
  # (the GPU machine's torch lives in a venv, /opt/torch/.venv: its whole prefix comes along)
  # (outermost folders only: a site-packages folder copied before its venv would leave out bin/)
  for d in $($PY -c 'import os, sys
ps = sorted(p for p in {sys.prefix, sys.base_prefix, *sys.path} if p.startswith("/") and not p.startswith(("/usr", "/tmp")) and os.path.isdir(p))
print(" ".join(p for p in ps if not any(p.startswith(q + "/") for q in ps)))'); do
    mkdir -p "$IMG$(dirname "$d")" && cp -a --one-file-system "$d" "$IMG$d"
  done
  # the C compiler the environment names (CC; this machine's is /opt/gcc/bin/gcc): triton
  # builds its CUDA helper with $CC when vLLM first asks for the GPU, and the job's environment
  # (CC included) reaches the container, so an image without it fails there (RESULTS part 12)
  if [[ "${CC:-}" == /* && "$CC" != /usr/* ]]; then
    d=$(dirname "$(dirname "$CC")")
    mkdir -p "$IMG$(dirname "$d")" && cp -a --one-file-system "$d" "$IMG$d" && echo "compiler: $CC ($d, $(du -sh "$d" | cut -f1))"
  fi
  rm -rf "$IMG/etc/munge" "$IMG/etc/slurm"  # this host's munge key and Slurm: never in an image
  mkdir -p "$IMG"/{proc,dev,sys,tmp,root,run,var/tmp,home,opt/sf}
  cp -al "$BUNDLE" "$IMG/opt/sf/site"
  echo "image tree: $(du -sh --apparent-size "$IMG" | cut -f1) in $(( $(date +%s) - s0 )) s; python $PY"
  bash "$REPO/scripts/build-container" --rootfs "$IMG" --python "$PY" --no-default-mounts \
    --mount /usr/local/nvidia:ro --out "$CT/verl-0.9.1" 0.9.1 || { note "container: build-container failed"; return 1; }
  # Slurm's OCI runtime: oci.conf beside slurm.conf, read by slurmstepd at every step
  install -m 755 "$REPO/scripts/sf-oci-run" /etc/slurm/sf-oci-run
  local runc=$W/slurm/usr/sbin/runc cid='%n.%u.%j.%s.%t'
  cat >/etc/slurm/oci.conf <<OCI
RunTimeQuery="$runc --root=/run/sfkit-runc/%u state $cid"
RunTimeKill="$runc --root=/run/sfkit-runc/%u kill -a $cid"
RunTimeDelete="$runc --root=/run/sfkit-runc/%u delete --force $cid"
RunTimeRun="exec /usr/bin/python3 /etc/slurm/sf-oci-run %b %n %j -- $runc --root=/run/sfkit-runc/%u run $cid -b %b"
OCI
  "$runc" --version | head -1
  sed -e "s#@BUNDLE@#$CT/verl-0.9.1#; s#@PY@#$PY#" "$HERE/rl-runtimes-oci.yaml" >"$W/runtimes-ct.yaml"
  # the container's own packages: the login shell's PYTHONPATH (the host's bundle) stays out
  sed -e "s#^runtime_registry: .*#runtime_registry: $W/runtimes-ct.yaml#" \
      -e "s#pass_login_env: \[PYTHONPATH, LD_LIBRARY_PATH\]#pass_login_env: [LD_LIBRARY_PATH]#" "$SITE" >"$W/site-ct.yaml"
  grep -E '^runtime_registry|pass_login_env' "$W/site-ct.yaml"
  # the driver's libraries where the container sees them (bound read-only from the host), for
  # the probe and the run: the login side's LD_LIBRARY_PATH reaches the job (pass_login_env);
  # the lane runs in a subshell of its own, so this stays out of the other lanes
  [[ -d /usr/local/nvidia/lib64 ]] && export LD_LIBRARY_PATH=/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # one step beside the run: what the container sees (its system, python, packages, the GPU),
  # on n2 (partition teach), so the run on n3 starts at the same time
  ( timeout 180 srun -p teach -N1 --gres=gpu:1 --container="$CT/verl-0.9.1" --export=ALL,PYTHONPATH=/opt/sf/site \
    "$PY" -c 'import os, sys, torch, ray, verl, vllm
print("in container:", open("/etc/sf-container").read().splitlines()[0], "| os:", open("/etc/os-release").read().split("PRETTY_NAME=")[1].splitlines()[0])
print("python", sys.executable, sys.version.split()[0], "| torch", torch.__version__, "ray", ray.__version__, "verl", verl.__version__, "vllm", vllm.__version__, "from", os.path.dirname(vllm.__file__))
print("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"), "| cuda:", torch.cuda.is_available(), torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
print("mount ns", os.readlink("/proc/self/ns/mnt"), "(host: " + os.environ.get("SF_KIT_HOST_MNT", "?") + ")")
print("LD_LIBRARY_PATH", os.environ.get("LD_LIBRARY_PATH"))
import subprocess; cc = os.environ.get("CC", "gcc"); print("CC", cc, "->", subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[:1])' 2>&1 | tail -9
  echo "probe exited ${PIPESTATUS[0]}"
  ) &
  rm -rf "$EXP/experiments/tiny-ct" && cp -r "$EXP/experiments/tiny-grpo" "$EXP/experiments/tiny-ct"
  ( export SF_SITE=$W/site-ct.yaml REQUEUE_AT=${CT_REQUEUE_AT:-}
    sf_submit ct tiny-ct --profile h200-box:1 --set total_training_steps="$CT_STEPS" --set gpu_memory_utilization=0.15 ) &
  local SFPID=$!
  # the containers while it runs: runc's own list (one per Ray node step, the driver's)
  for _ in $(seq 600); do
    d=$(cat "$L/ct-run-dir.txt" 2>/dev/null)
    [[ -n "$d" ]] && grep -q '"step":1,' "$d"/metrics/attempt-0.jsonl 2>/dev/null && break
    kill -0 $SFPID 2>/dev/null || break; sleep 1
  done
  "$runc" --root=/run/sfkit-runc/root list 2>&1 | tee "$L/ct-runc-list.txt"
  wait $SFPID; echo "container: submit to end $(( $(date +%s) - s0 )) s"
  d=$(cat "$L/ct-run-dir.txt" 2>/dev/null)
  [[ -n "$d" ]] || return 1
  ls "$d/checkpoints" 2>&1 | tr '\n' ' '; echo
  grep -h '"step"' "$d"/metrics/attempt-*.jsonl 2>/dev/null | $PY -c 'import json, sys
for line in sys.stdin:
    r = json.loads(line); m = r.get("data", r)  # sf metrics lines: {"step": N, "data": {...}}
    print("step", r.get("step"), "reward", m.get("critic/rewards/mean"), "timing_s/step", m.get("timing_s/step"))'
  $PY -c 'import json, sys; print("plan runtime:", json.load(open(sys.argv[1]))["job"]["runtime"])' "$d/plan.json" 2>&1 | cut -c1-400
  (cd "$EXP" && SF_SITE=$W/site-ct.yaml sf status "$(basename "$d")" --timeline 2>&1 | tail -30)
}
if want container; then
  stage "container: GRPO on n3 in Slurm's OCI container (image of this machine + the RL bundle), $CT_STEPS steps (lane log: ct-lane.log)"
  export SF_KIT_HOST_MNT; SF_KIT_HOST_MNT=$(readlink /proc/self/ns/mnt)
  container_lane >"$L/ct-lane.log" 2>&1 &
  CT_PID=$!
fi
# -- issue 34 on ONE H200 (RESULTS.md part 10): a run that learns through sf's own commands,
# and the stacks of a real hang. From the start, with three Slurm nodes on the one card:
#   GPU_SHARE=3 bash benchmarks/gpu/rl.sh start install slurm assets hang learn
# hang (a lane in the background, n2): tiny-grpo from the random model, hang limit 60 s, no
#   restart and no requeue; its trainer loop (`ray::TaskRunner`, this job's only) SIGSTOPped
#   once step HANG_AT is logged: the watchdog must declare the hang, save py-spy stacks of
#   every process, and end the run; then `sf logs RUN --stacks`.
# learn (n1): sf submit tiny-sft (verl/sft, SFT_STEPS steps, a checkpoint every SFT_SAVE);
#   every checkpoint exported with `sf export --local`, its sampled reward on the RL prompts
#   measured (sft_pick.py) and the one nearest 0.35 exported by `sf export` (a Slurm job): the
#   SFT's newest export; then `sf submit tiny-learn --model run:SFT` (GRPO, LSTEPS steps,
#   actor_lr LEARN_LR, validation before training and every 10 steps) on n1 and, with
#   SWEEP_LRS set, `sf sweep tiny-learn --model run:SFT --grid actor_lr=SWEEP_LRS` as one job
#   array on partition sweep (n2 + n3), side by side on the same card.
LSTEPS=${LSTEPS:-40}; SFT_STEPS=${SFT_STEPS:-60}; SFT_SAVE=${SFT_SAVE:-10}; HANG_AT=${HANG_AT:-2}
LEARN_LR=${LEARN_LR:-5e-5}; SWEEP_LRS=${SWEEP_LRS-2e-5,1e-4}
hang_lane() {
  local exp=tiny-hang D
  rm -rf "$EXP/experiments/$exp" && cp -r "$EXP/experiments/tiny-grpo" "$EXP/experiments/$exp"
  sed -i -e 's#^slurm: .*#slurm: {time: "00:20:00", max_requeues: 0, hang_timeout_s: 60, first_step_timeout_s: 900, max_restarts_in_place: 0}#' \
    "$EXP/experiments/$exp/config.yaml"
  grep '^slurm:' "$EXP/experiments/$exp/config.yaml"
  rm -f "$L/hang-run-dir.txt" "$L/hang.ended"
  local s0; s0=$(date +%s)
  sf_submit hang "$exp" --profile h200-teach:1 --set total_training_steps=6 --set gpu_memory_utilization=0.15 &
  local SFPID=$!
  for _ in $(seq 240); do [[ -s "$L/hang-run-dir.txt" ]] && break; sleep 0.5; done
  D=$(cat "$L/hang-run-dir.txt" 2>/dev/null)
  [[ -n "$D" ]] && $PY "$HERE/heal_watch.py" "$D" "$L/results-hang.json" --kill-at 0 --stop-at "$HANG_AT" \
    --requeue-at 0 --steps 6 --timeout 1100 --this-job --stop-file "$L/hang.ended" 2>&1 | tee "$L/hang-watch.log" &
  local WPID=$!
  wait $SFPID; echo "hang: submit to end $(( $(date +%s) - s0 )) s"
  sleep 2; touch "$L/hang.ended"; wait $WPID
  [[ -n "$D" ]] || return 1
  ls -la "$D/stacks" "$D"/stacks/* 2>&1 | head -20
  (cd "$EXP" && sf logs "$(basename "$D")" --stacks >"$L/hang-stacks.txt" 2>&1; echo "sf logs --stacks exited $?")
  grep -c '^Thread\|^    ' "$L/hang-stacks.txt" | sed 's/^/stack lines: /'
  head -80 "$L/hang-stacks.txt"
  (cd "$EXP" && sf status "$(basename "$D")" 2>&1 | tail -12)
  cat "$D/reason" 2>/dev/null
}
if want hang || want learn; then
  stage "doctor: sf doctor with the kit's site (its runtime has py-spy: bundle bin/ and the runtime's bin/)"
  (cd "$EXP" && timeout 90 sf doctor 2>&1) | tee "$L/doctor.txt" | grep -iE 'py-spy|runtime|checks'
fi
if want hang; then
  stage "hang: tiny-grpo on n2, hang limit 60 s, SIGSTOP of this job's TaskRunner after step $HANG_AT (lane log: hang-lane.log)"
  hang_lane >"$L/hang-lane.log" 2>&1 &
  HANG_PID=$!
fi
if want learn; then
  stage "learn: assets (SFT conversations 9,600/256 with their own tokenizer; RL prompts 2,048/128)"
  [[ -f $A/sft/model/config.json ]] || $PY "$HERE/make_tiny.py" --out "$A/sft" | tail -1
  $PY "$HERE/rl_data.py" "$A/learn" --train 2048 --val 128
  cp "$HERE/reward_tiny.py" "$A/reward_tiny.py"
  stage "learn: sf submit tiny-sft ($SFT_STEPS steps, a checkpoint every $SFT_SAVE) on n1"
  s0=$(date +%s)
  sf_submit sft tiny-sft --set total_training_steps="$SFT_STEPS" --set save_freq="$SFT_SAVE"
  echo "sft: submit to end $(( $(date +%s) - s0 )) s"
  SFT_DIR=$(cat "$L/sft-run-dir.txt" 2>/dev/null); SFT=$(basename "${SFT_DIR:-none}")
  ls "$SFT_DIR/checkpoints" 2>&1 | tr '\n' ' '; echo
  stage "learn: every SFT checkpoint exported (sf export --local), its reward on the RL prompts"
  cand=(); pids=()
  for d in "$SFT_DIR"/checkpoints/global_step_*; do
    [[ -d "$d" ]] || continue
    st=${d##*_}; cand+=("$st=$W/cand/$st")
    (cd "$EXP" && timeout 240 sf export "$SFT" --checkpoint "$d" --checkpoint-format verl-fsdp --target "$W/cand/$st" \
      --local >"$L/cand-$st.txt" 2>&1; echo "export of step $st exited $?") &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  timeout 300 $PY "$HERE/sft_pick.py" "$L/sft-pick.json" --prompts "$A/learn/train.parquet" --reward "$A/reward_tiny.py" \
    "${cand[@]}" 2>&1 | grep -v Warning
  PICK=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["pick"] or "")' "$L/sft-pick.json" 2>/dev/null)
  [[ -n "$PICK" ]] || { PICK=${SFT_FALLBACK:-20}; note "sft_pick gave no pick: step $PICK"; }
  stage "learn: sf export $SFT --checkpoint global_step_$PICK (a Slurm job): the SFT's newest export"
  (cd "$EXP" && sf export "$SFT" --checkpoint "$SFT_DIR/checkpoints/global_step_$PICK" --checkpoint-format verl-fsdp 2>&1) | tee "$L/sft-export.txt"
  for _ in $(seq 360); do compgen -G "$SFT_DIR/exports/*/config.json" >/dev/null && break; sleep 0.5; done
  ls -d "$SFT_DIR"/exports/* 2>&1
  stage "learn: sf submit tiny-learn --model run:$SFT (GRPO, $LSTEPS steps, actor_lr $LEARN_LR) on n1; sweep actor_lr=$SWEEP_LRS on n2+n3"
  s0=$(date +%s)
  sf_submit learn tiny-learn --model "run:$SFT" --set total_training_steps="$LSTEPS" --set actor_lr="$LEARN_LR" &
  LEARN_PID=$!
  SWEEP=""
  if [[ -n "$SWEEP_LRS" ]]; then
    sleep 2
    # its own experiment name: sf_submit finds the GRPO's run dir by name (tiny-learn-*)
    rm -rf "$EXP/experiments/tiny-lr" && cp -r "$EXP/experiments/tiny-learn" "$EXP/experiments/tiny-lr"
    (cd "$EXP" && sf sweep tiny-lr --model "run:$SFT" --profile h200-sweep:1 --grid actor_lr="$SWEEP_LRS" \
      --set total_training_steps="$LSTEPS" --json >"$L/sweep-submit.json" 2>"$L/sweep-submit.err"); echo "sf sweep exited $?"
    cat "$L/sweep-submit.err"
    SWEEP=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["sweep"])' "$L/sweep-submit.json" 2>/dev/null)
    ARRAY=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["job_ids"][0])' "$L/sweep-submit.json" 2>/dev/null)
    echo "$SWEEP" >"$L/sweep-id.txt"; echo "sweep $SWEEP: array job $ARRAY"
  fi
  wait $LEARN_PID; echo "learn: submit to end $(( $(date +%s) - s0 )) s"
  LEARN_DIR=$(cat "$L/learn-run-dir.txt" 2>/dev/null)
  [[ -n "$LEARN_DIR" ]] && (cd "$EXP" && sf metrics "$(basename "$LEARN_DIR")" 2>&1 | tee "$L/learn-metrics.txt" | tail -14 &&
    sf plot "$(basename "$LEARN_DIR")" -o "$L/learn.png" 2>&1 | tail -1)
  if [[ -n "$SWEEP" ]]; then
    for _ in $(seq 1500); do [[ -z "$(squeue -h -j "$ARRAY" 2>/dev/null)" ]] && break; sleep 1; done
    echo "sweep: submit to end $(( $(date +%s) - s0 )) s"
    (cd "$EXP" && sf status "$SWEEP" 2>&1 | tail -8; sf metrics "$SWEEP" 2>&1 | tee "$L/sweep-metrics.txt";
      sf metrics "$SWEEP" --json >"$L/sweep-metrics.json" 2>&1; sf plot "$SWEEP" -o "$L/sweep.png" 2>&1 | tail -1)
    for m in "$W"/runs/tiny-lr-*/; do grep -H 'actor.optim.lr' "$m/overrides.txt" 2>/dev/null; done
  fi
  $PY "$HERE/learn_summary.py" --logs "$L" --out "$L/results-learn.json" 2>&1 | tail -40
fi
if [[ -n "${CT_PID:-}" ]]; then
  stage "container (lane): waiting for it"
  wait "$CT_PID"; echo "container lane exited $?"; tail -n 80 "$L/ct-lane.log"
fi
if [[ -n "${HEAL_LANE_PID:-}" ]]; then
  stage "heal (lane): waiting for it"
  wait "$HEAL_LANE_PID"; echo "heal lane exited $?"; tail -n 80 "$L/heal-lane.log"
fi
if [[ -n "${HANG_PID:-}" ]]; then
  stage "hang (lane): waiting for it"
  wait "$HANG_PID"; echo "hang lane exited $?"; tail -n 60 "$L/hang-lane.log"
fi
if want summary2; then
  stage "summary2"
  $PY "$HERE/rl_steps.py" --logs "$L" --runs "$W/runs" --out "$L/results2.json" --orders 2>&1 | tail -60
fi

if want summary; then
  stage "summary"
  $PY "$HERE/rl_steps.py" --logs "$L" --runs "$W/runs" --out "$L/results.json" 2>&1 | tail -60
fi
if want scale && [[ -z "${SCALE_BESIDE:-}" ]]; then scale_lane; fi
if [[ -n "${SCALE_PID:-}" ]]; then
  stage "scale (beside the GPU stages): waiting for it"
  wait "$SCALE_PID"; echo "scale lane exited $?"; tail -n 40 "$L/scale-lane.log"
fi
stage "chain end"
