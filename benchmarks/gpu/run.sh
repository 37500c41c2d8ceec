#!/bin/bash
# Issue 8: a real verl SFT run on the H200, submitted by sf through Slurm, checkpointed,
# exported and loaded; then the same verl command bare (torchrun, no sf) for step time and
# peak memory. One `device` run, from the repository root, carrying .whl and .debs:
#
#   STEPS=300 SAVE_FREQ=100 bash benchmarks/gpu/run.sh
#
# .whl/ and .debs/ come from benchmarks/gpu/prepare.sh (run here, with network).
#
# Env: STEPS (training steps, default 300), SAVE_FREQ (checkpoint and validation every N
# steps, default 100), BATCH (global batch, default 32), SFGPU_WORK (default /root/sfgpu,
# kept on a warm machine: a second call skips the installs), STAGES (default
# "py slurm assets sf export check bare"; also bare0 = bare before sf, sf2 = sf again),
# GRES_FLAGS (gres.conf Flags=, default nvidia_gpu_env; empty = Slurm's default env, see
# slurm_up.sh), SF_TIMEOUT/BARE_TIMEOUT (s per training run), DEADLINE (s; stages are cut
# so that the summary runs before it), USE_ALT_TRANSFORMERS=1 (transformers 5.10.4),
# OUT (what comes back; default $SFGPU_WORK/out). Results of the real runs: RESULTS.md.
#
# $OUT gets: driver.log, results.json (the numbers), export_check.json, logs.tgz (sf run
# dir logs, verl logs, slurm logs, step stamps, versions), at most 8 files as the tool allows.

set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$REPO/benchmarks/gpu
W=${SFGPU_WORK:-/root/sfgpu}
O=${OUT:-$W/out}
L=$W/logs
STEPS=${STEPS:-300}
SAVE_FREQ=${SAVE_FREQ:-100}
BATCH=${BATCH:-32}
STAGES=" ${STAGES:-py slurm assets sf export check bare} "
rm -rf "$L"  # a warm machine keeps $W: the last call's logs already came back in its $OUT
mkdir -p "$W" "$O" "$L"
exec > >(tee -a "$O/driver.log") 2>&1

# Never use NVLink multicast there (KINDS.md); these reach the Slurm jobs through sbatch's
# default --export=ALL and the site file's env too.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
PY=$(command -v python3)
PREFIX=$($PY -c 'import sys; print(sys.prefix)')
export PATH="$PREFIX/bin:$PATH"
T0=$(date +%s)
stage() { echo; echo "=== [$(date -u +%H:%M:%S) +$(( $(date +%s) - T0 ))s] $*"; }
want() { [[ "$STAGES" == *" $1 "* ]]; }
note() { echo "$1" >>"$L/notes.txt"; echo "NOTE: $1"; }
# Seconds a stage may still take: its own limit, capped so that the summary (which packs
# $OUT) still runs before DEADLINE seconds (default 570, under the device's 600 s a call).
left() { local l=$(( ${DEADLINE:-570} - 25 - ($(date +%s) - T0) )); (( l > $1 )) && l=$1; (( l < 1 )) && l=1; echo $l; }

stage "start: repo $REPO, work $W, python $PY (prefix $PREFIX), steps $STEPS, save/test every $SAVE_FREQ, batch $BATCH"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

# ---------------------------------------------------------------- 1. python packages
if want py; then
  stage "py: wheels into $PREFIX (no index, no deps), ray from its repacked tarball, sf editable"
  KEY="$REPO $(ls "$REPO/.whl" | md5sum | cut -c1-12)"
  if [[ "$(cat "$W/.py-done" 2>/dev/null)" != "$KEY" ]]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$REPO"/.whl/*.whl || note "pip install of wheels failed"
    PURE=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    tar xJf "$REPO"/.whl/ray-*.tar.xz -C "$PURE" || note "ray untar failed"
    $PY -m pip install -q --no-index --no-deps --no-build-isolation -e "$REPO" || note "pip install -e sf failed"
    echo "$KEY" >"$W/.py-done"
  fi
  if [[ "${USE_ALT_TRANSFORMERS:-0}" == 1 ]]; then
    note "USE_ALT_TRANSFORMERS=1: installing transformers 5.10.4 + tokenizers 0.22.2 (verl 0.9.1 pins transformers <5.11)"
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$REPO"/.whl/alt/*.whl
  fi
  if ! $PY -c "import ray, verl, verl.trainer.sft_trainer, verl.model_merger.fsdp_model_merger" 2>"$L/import-error.txt"; then
    grep -v Warn "$L/import-error.txt" | tail -5
    note "import verl.trainer.sft_trainer failed: $(tail -1 "$L/import-error.txt")"
  fi
  $PY -m pip list 2>/dev/null | grep -iE '^(torch|transformers|tokenizers|verl|ray|hydra-core|omegaconf|antlr4-python3-runtime|tensordict|torchdata|datasets|pyarrow|pandas|numpy|sf|accelerate|peft) ' | tee "$L/versions.txt"
  if ! command -v sf >/dev/null; then
    note "sf not on PATH after pip install -e: using a wrapper around launcher.cli.app"
    mkdir -p "$W/bin"; printf '#!/bin/sh\nPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} exec %s -m launcher.cli.app "$@"\n' "$REPO" "$PY" >"$W/bin/sf"
    chmod +x "$W/bin/sf"
  fi
fi
[[ -x "$W/bin/sf" ]] && export PATH="$W/bin:$PATH"

# ---------------------------------------------------------------- 2. slurm
if want slurm; then
  stage "slurm: unpack Debian 12 debs, munge, slurmctld, slurmd with gpu:1"
  # shellcheck source=slurm_up.sh
  source "$HERE/slurm_up.sh" "$REPO/.debs" "$W/slurm" || note "slurm did not come up"
  timeout 60 srun -N1 -n1 --gres=gpu:1 bash -c 'echo "srun: host=$(hostname) CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset} ROCR_VISIBLE_DEVICES=${ROCR_VISIBLE_DEVICES-unset} GPU_DEVICE_ORDINAL=${GPU_DEVICE_ORDINAL-unset} ZE_AFFINITY_MASK=${ZE_AFFINITY_MASK-unset}"; nvidia-smi -L' || note "srun --gres=gpu:1 failed"
else
  source "$HERE/slurm_up.sh" "$REPO/.debs" "$W/slurm" >/dev/null 2>&1 || true
fi

# ---------------------------------------------------------------- 3. tiny model + data
A=$W/assets
if want assets; then
  stage "assets: tiny Qwen2 model, BPE tokenizer with chat template, chat parquet"
  ROWS=$(( (STEPS + 5) * BATCH ))
  if [[ "$(cat "$A/.rows" 2>/dev/null)" != "$ROWS" ]]; then
    rm -rf "$A"
    $PY "$HERE/make_tiny.py" --out "$A" --train "$ROWS" --val 256 | tee "$L/assets.json" && echo "$ROWS" >"$A/.rows"
  fi
fi

# ---------------------------------------------------------------- 4. sf new + sf submit
SITE=$W/site-h200.yaml
REG=$W/runtimes.yaml
CPUS=$(sinfo -h -o %c 2>/dev/null | head -1); CPUS=${CPUS:-16}
RT=$PREFIX
if [[ ! -f "$PREFIX/bin/activate" ]]; then
  # A venv-shaped folder around the image's python (sf's venv runtime sources bin/activate).
  RT=$W/rt; mkdir -p "$RT/bin"
  printf '#!/bin/sh\nexec %s "$@"\n' "$PY" >"$RT/bin/python"; chmod +x "$RT/bin/python"
  printf 'export PATH=%s:%s:$PATH\n' "$RT/bin" "$(dirname "$PY")" >"$RT/bin/activate"
  note "no $PREFIX/bin/activate: runtime is the wrapper folder $RT"
fi
sed -e "s#@RUNS@#$W/runs#; s#@REG@#$REG#; s#@CPUS@#$CPUS#" "$HERE/site-h200.yaml" >"$SITE"
sed -e "s#@PREFIX@#$RT#" "$HERE/runtimes.yaml" >"$REG"
export SF_SITE=$SITE FORGE_RUNTIME_REGISTRY_FILE=$REG
EXP=$W/exp
mkdir -p "$EXP"
SFARGS=(--profile h200:1 --model "$A/model" --train-data "$A/data/train.parquet" --validation-data "$A/data/val.parquet"
  --set trainer.total_training_steps="$STEPS" --set save_freq="$SAVE_FREQ" --set test_freq="$SAVE_FREQ"
  --set data.train_batch_size="$BATCH" --set micro_batch_size_per_gpu=8 --set actor_lr=2e-4
  --set 'trainer.logger=[console,file]' --set trainer.project_name=sfgpu
  --set model.use_remove_padding=False
  --set +model.override_config.attn_implementation=sdpa)
run_bare() {  # run_bare TAG OVERRIDES_FILE: the sf run's verl command, bare torchrun
  local tag=$1 src=$2 rc s0 s1 WATCH GMEM B=$W/$1
  stage "$tag: torchrun --standalone, no sf, no Slurm, overrides from $src"
  rm -rf "$B"; mkdir -p "$B"
  mapfile -t OVR <"$src"
  for i in "${!OVR[@]}"; do
    case "${OVR[$i]}" in
      trainer.default_local_dir=*) OVR[$i]="trainer.default_local_dir=$B/checkpoints" ;;
      trainer.experiment_name=*) OVR[$i]="trainer.experiment_name=$tag" ;;
    esac
  done
  printf '%s\n' "${OVR[@]}" >"$L/$tag-overrides.txt"
  rm -f "$L/$tag.stop"
  $PY "$HERE/steptimes.py" watch "$B/**/sfgpu/$tag.jsonl" "$L/$tag-steps.jsonl" --stop "$L/$tag.stop" & WATCH=$!
  $PY "$HERE/steptimes.py" gpumem "$L/$tag-gpumem.csv" --stop "$L/$tag.stop" & GMEM=$!
  cd "$B" || exit 1
  s0=$(date +%s.%N)
  env -u VERL_FILE_LOGGER_PATH CUDA_VISIBLE_DEVICES=0 timeout "$(left "${BARE_TIMEOUT:-420}")" "$(dirname "$PY")/torchrun" \
    --standalone --nnodes=1 --nproc_per_node=1 -m verl.trainer.sft_trainer "${OVR[@]}" >"$L/$tag-train.log" 2>&1
  rc=$?
  s1=$(date +%s.%N)
  touch "$L/$tag.stop"; wait $WATCH $GMEM 2>/dev/null
  echo "{\"rc\": $rc, \"start_to_end_s\": $(awk "BEGIN{print $s1 - $s0}")}" >"$L/$tag-wall.json"
  [[ $rc == 0 ]] || { note "$tag: bare torchrun exited $rc"; tail -30 "$L/$tag-train.log"; }
  ls "$B/checkpoints" >"$L/$tag-checkpoints.txt" 2>&1
  cd "$REPO" || exit 1
}

RUN_DIR=""
run_sf() {  # run_sf TAG: one sf submit --wait, its steps stamped into $L/TAG-steps.jsonl
  local tag=$1 rc s0 s1 WATCH GMEM
  stage "$tag: sf new + validate + submit --wait (site $SITE, runtime registry $REG)"
  cd "$EXP" || exit 1
  [[ -f experiments/tiny-sft/config.yaml ]] || sf new tiny-sft --method verl/sft
  cp "$SITE" "$REG" "$L/"; cp experiments/tiny-sft/config.yaml "$L/sf-config.yaml"
  sf validate tiny-sft "${SFARGS[@]}" --set trainer.experiment_name="$tag" 2>&1 | tee "$L/$tag-validate.txt"
  rm -f "$L/$tag.stop"; rm -rf "$EXP/sfgpu/$tag.jsonl"
  $PY "$HERE/steptimes.py" watch "$W/runs/tiny-sft-*/metrics/attempt-*.jsonl|$EXP/**/sfgpu/$tag.jsonl" "$L/$tag-steps.jsonl" --stop "$L/$tag.stop" & WATCH=$!
  $PY "$HERE/steptimes.py" gpumem "$L/$tag-gpumem.csv" --stop "$L/$tag.stop" & GMEM=$!
  s0=$(date +%s.%N)
  timeout "$(left "${SF_TIMEOUT:-420}")" sf submit tiny-sft "${SFARGS[@]}" --set trainer.experiment_name="$tag" --wait 2>&1 | tee "$L/$tag-submit.txt"
  rc=${PIPESTATUS[0]}
  s1=$(date +%s.%N)
  touch "$L/$tag.stop"; wait $WATCH $GMEM 2>/dev/null
  echo "{\"rc\": $rc, \"submit_to_end_s\": $(awk "BEGIN{print $s1 - $s0}")}" >"$L/$tag-wall.json"
  [[ $rc == 0 ]] || note "$tag: sf submit --wait exited $rc"
  if [[ $rc == 124 ]]; then  # our timeout: do not leave the job on the GPU
    local job; job=$(grep -oE 'as job [0-9]+' "$L/$tag-submit.txt" | grep -oE '[0-9]+$' | head -1)
    [[ -n "$job" ]] && scancel "$job" && sleep 3
  fi
  RUN_DIR=$(ls -td "$W"/runs/tiny-sft-* 2>/dev/null | head -1)
  echo "$tag run dir: $RUN_DIR"; echo "$RUN_DIR" >"$L/$tag-run-dir.txt"
  scontrol show job 2>/dev/null | grep -E 'JobId|JobState|ExitCode|TRES' | tail -4
  cd "$REPO" || exit 1
}
if want bare0; then  # bare first (order check): the overrides sf would submit, from `sf render`
  (cd "$EXP" && { [[ -f experiments/tiny-sft/config.yaml ]] || sf new tiny-sft --method verl/sft; } &&
    sf render tiny-sft "${SFARGS[@]}" --set trainer.experiment_name=sf -o "$W/render" >/dev/null)
  run_bare bare0 "$W/render/overrides.txt"
fi
want sf && run_sf sf
RUN_DIR=${RUN_DIR:-$(cat "$L/sf-run-dir.txt" 2>/dev/null)}
RUN_ID=$(basename "${RUN_DIR:-none}")

# ---------------------------------------------------------------- 5. sf export (Slurm job)
EXPORT_DIR=""
if want export && [[ -n "$RUN_DIR" ]]; then
  stage "export: sf export $RUN_ID --checkpoint-format verl-fsdp (a Slurm job)"
  ls "$RUN_DIR/checkpoints" 2>&1 | tee "$L/checkpoints.txt"
  LAST=$(cat "$RUN_DIR/checkpoints/latest_checkpointed_iteration.txt" 2>/dev/null)
  ls -la "$RUN_DIR/checkpoints/global_step_$LAST" 2>&1 | tee "$L/checkpoint-layout.txt"
  out=$(timeout "$(left 60)" sf export "$RUN_ID" --checkpoint-format verl-fsdp 2>&1); echo "$out" | tee "$L/sf-export.txt"
  if echo "$out" | grep -q "has no actor/" && [[ -f "$RUN_DIR/checkpoints/global_step_$LAST/fsdp_config.json" ]]; then
    # verl 0.9.1's SFT trainer saves the FSDP shards in global_step_N/ itself, not in
    # global_step_N/actor/ as the RL trainers do; sf export only accepts the RL layout.
    note "sf export refused the SFT checkpoint layout (no actor/); workaround: symlink global_step_$LAST/actor -> . and export again"
    echo "actor-symlink" >"$L/sf-export-workaround.txt"
    ln -s . "$RUN_DIR/checkpoints/global_step_$LAST/actor"
    out=$(timeout "$(left 60)" sf export "$RUN_ID" --checkpoint-format verl-fsdp 2>&1); echo "$out" | tee -a "$L/sf-export.txt"
  fi
  JOB=$(echo "$out" | grep -oE 'export job [0-9]+' | grep -oE '[0-9]+$')
  if [[ -n "$JOB" ]]; then
    for _ in $(seq $(( $(left 120) * 2 ))); do
      st=$(scontrol show job "$JOB" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2)
      [[ "$st" =~ ^(PENDING|RUNNING|CONFIGURING|COMPLETING)$ ]] || break
      sleep 0.5
    done
    echo "export job $JOB: $st"; echo "$st" >"$L/sf-export-state.txt"
  fi
  EXPORT_DIR=$(ls -d "$RUN_DIR"/exports/global_step_* 2>/dev/null | sort -V | tail -1)
  if [[ -z "$EXPORT_DIR" || ! -f "$EXPORT_DIR/config.json" ]]; then
    note "Slurm export did not produce a model (job ${JOB:-none}, state ${st:-?}); trying sf export --local"
    rm -rf "$RUN_DIR"/exports
    timeout "$(left 120)" sf export "$RUN_ID" --checkpoint-format verl-fsdp --local 2>&1 | tee -a "$L/sf-export.txt"
    EXPORT_DIR=$(ls -d "$RUN_DIR"/exports/global_step_* 2>/dev/null | sort -V | tail -1)
    [[ -n "$EXPORT_DIR" ]] && echo "local" >"$L/sf-export-mode.txt"
  else
    echo "slurm" >"$L/sf-export-mode.txt"
  fi
  echo "export dir: $EXPORT_DIR"; ls -la "$EXPORT_DIR" 2>&1 | tee -a "$L/sf-export.txt"
fi

# ---------------------------------------------------------------- 6. load + generate
if want check; then
  EXPORT_DIR=${EXPORT_DIR:-$(ls -d "$RUN_DIR"/exports/global_step_* 2>/dev/null | sort -V | tail -1)}
  stage "check: transformers loads $EXPORT_DIR and generates"
  if [[ -n "$EXPORT_DIR" ]]; then
    timeout "$(left 120)" $PY "$HERE/export_check.py" "$EXPORT_DIR" --base "$A/model" --val "$A/data/val.parquet" \
      --out "$O/export_check.json" || note "export check failed"
  else
    note "no export to check"
  fi
fi

# ---------------------------------------------------------------- 7. the same command bare
if want bare && [[ -f "$RUN_DIR/overrides.txt" ]]; then
  run_bare bare "$RUN_DIR/overrides.txt"
fi

# ---------------------------------------------------------------- 7b. sf again (order check)
if want sf2; then
  SF_RUN_DIR=$RUN_DIR
  run_sf sf2
  RUN_DIR=$SF_RUN_DIR
fi

# ---------------------------------------------------------------- 8. numbers + logs back
stage "summary"
$PY "$HERE/compare.py" --logs "$L" --every "$SAVE_FREQ" --steps "$STEPS" --batch "$BATCH" --out "$O/results.json"
{
  for d in "$W"/runs/*; do find "$d" -path "$d/checkpoints" -prune -o -path "$d/exports" -prune -o -type f -print; done
  [[ -d "$EXP" ]] && find "$EXP" -type f \( -name '*.jsonl' -o -name '*.yaml' -o -name '*.log' \) -size -4M -print
  find "$L" -type f -print
  find /var/log/slurm -type f -print 2>/dev/null
  [[ -n "$RUN_DIR" ]] && find "$RUN_DIR/exports" -maxdepth 2 -type f ! -name '*.safetensors' ! -name '*.bin' -print 2>/dev/null
} | sort -u >"$W/tarlist.txt"
tar czf "$O/logs.tgz" -P -T "$W/tarlist.txt" 2>/dev/null
ls -la "$O"
stage "done"
