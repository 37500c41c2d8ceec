"""The batch script's text, section by section (pure): what render_script writes, from the
values it has checked (every #SBATCH value) and quoted (every shell word) before.

Python, not a Jinja template, so that `sf submit` and its dry run never import Jinja: its
import and the template's compile were ~20 ms of every dry run (benchmarks/login_cost.py).
The export and eval jobs keep their templates (templates/*.j2); they are not on that path.
"""

from __future__ import annotations

# (a backslash at a line's end continues it: the script's one long `reason` line)
_REQUEUE_TRAP = """\
# Requeue on the wall-time/preemption signal (--signal=B:USR1@{lead}): the whole job
# (every het group) goes back to the queue, at most SF_MAX_REQUEUES times, and verl resumes
# from the newest checkpoint (resume_mode=auto, absolute checkpoint dir). A job that ends
# normally is never requeued: only this signal does it.
sf_on_usr1() {{
  local restarts="${{SLURM_RESTART_COUNT:-0}}"
  if (( restarts < SF_MAX_REQUEUES )); then
    sf_phase requeued "restart=$((restarts + 1))" "signal=USR1"
    scontrol requeue "${{SLURM_HET_JOB_ID:-$SLURM_JOB_ID}}"
  else
    sf_phase requeue_refused "restarts=$restarts" "max_requeues=$SF_MAX_REQUEUES" "signal=USR1"
    "$SF_PYTHON" -m launcher.injob reason "$SF_RUN_DIR" \\
      "requeue refused: the job was already requeued $restarts times (max_requeues=$SF_MAX_REQUEUES); \
it runs on until its time limit" || true
  fi
}}
trap sf_on_usr1 USR1

"""

_ARRAY_TASK = """
# -- array sweep {sweep_id}: {size} points; this task's run dir, checkpoint dir
# and overrides come from manifest.json by SLURM_ARRAY_TASK_ID (one run dir per point) --
SF_TASK="${{SLURM_ARRAY_TASK_ID:-}}"
if [[ ! "$SF_TASK" =~ ^[0-9]+$ ]]; then
  echo "sf: this script is an array sweep ({sweep_id}): submit it with --array" >&2
  exit 2
fi
SF_RUN_DIR="$("$SF_PYTHON" -m launcher.injob point "$SF_MANIFEST" "$SF_TASK")" || exit 2
export SF_RUN_DIR
echo "sf: array task $SF_TASK -> $SF_RUN_DIR (its output: logs/slurm-${{SLURM_ARRAY_JOB_ID}}_${{SF_TASK}}.out there)"
exec >>"$SF_RUN_DIR/logs/slurm-${{SLURM_ARRAY_JOB_ID}}_${{SF_TASK}}.out" 2>&1
"""

_SUPERVISE = """\
# SIGTERM (scancel, a requeue) reaches every process of the job; the supervisor handles it
# and stops the steps itself. This shell keeps waiting for it rather than dying first: when
# the batch shell ends, Slurm kills what is left at once, which would cut the supervisor's
# last words short (its ended phase, or the excluded nodes after a requeue).
trap : TERM

# What the job writes about itself is its user's only: logs/ (Ray's, the driver's and
# Slurm's output) and events.jsonl; Ray's run-time dirs are private too (launcher/injob/private.py).
chmod go= "$SF_RUN_DIR/logs" "$SF_RUN_DIR/events.jsonl" 2>/dev/null || true

# verl's file logger (trainer.logger includes `file`; read by `sf metrics`) opens its file
# with mode "wb": one file per attempt, so a requeued attempt keeps the earlier history.
mkdir -p "$SF_RUN_DIR/metrics"
export VERL_FILE_LOGGER_PATH="$SF_RUN_DIR/metrics/attempt-${SLURM_RESTART_COUNT:-0}.jsonl"

"$SF_PYTHON" -m launcher.injob supervise \\
"""

_WAIT = """\
SF_SUPERVISOR=$!
while true; do
  wait "$SF_SUPERVISOR"
  rc=$?
  # a trapped signal interrupts `wait`; the supervisor is still running then
  kill -0 "$SF_SUPERVISOR" 2>/dev/null || break
done
exit "$rc"
"""


# long: the batch script top to bottom, one section after another, as it reads
def script_text(c: dict) -> str:
    """The batch script from render_script's checked and quoted values `c`."""
    out = ["#!/bin/bash\n"]
    for i, comp in enumerate(c["components"]):
        if i:
            out.append("#SBATCH hetjob\n")
        out.append(f"# -- het group {comp['het_group']}: pool {comp['pool']} ({comp['nodes']} x {comp['gpus']} GPUs, "
                   f"series {comp['series']})\n")
        out += [f"#SBATCH {d}\n" for d in comp["directives"]]
    array, name = c["array"], c["script_name"]
    out.append(f"#\n# Rendered by sf {c['sf_version']} for experiment {c['experiment']} ({c['method']}, "
               f"{c['framework']} {c['framework_version']}).\n")
    if array:
        out.append(f"# A job array: task i is point i of sweep {array['sweep_id']}; manifest.json beside this script\n"
                   f"# holds each point's run dir and overrides. `sbatch --array=I,J {name}` reruns points.\n")
    else:
        out.append(f"# Standalone: the overrides below are the whole verl command; `sbatch {name}`\n"
                   "# submits it again by hand. The run directory holds plan.json, overrides.txt and logs/.\n")
    out.append("set -uo pipefail\n\n")
    if c["login_env_unset"]:
        out.append("# the login node's Python and library paths stay out of the job (site: slurm.pass_login_env)\n"
                   f"{c['login_env_unset']}\n")
    if array:
        out.append(f"SF_SWEEP_DIR={array['sweep_dir']}\nSF_MANIFEST=\"$SF_SWEEP_DIR/manifest.json\"\n")
    else:
        out.append(f"SF_RUN_DIR={c['run_dir']}\nexport SF_RUN_DIR\n")
    out.append(f"SF_MAX_REQUEUES={c['max_requeues']}\n\n# -- environment (site, then experiment) --\n")
    out += [f"{line}\n" for line in c["env_lines"]]
    out.append(f"# -- runtime: {c['runtime_label']} --\n")
    out += [f"{line}\n" for line in c["activate_lines"]]
    if c["sf_root"]:
        out.append(f"export PYTHONPATH={c['sf_root']}${{PYTHONPATH:+:$PYTHONPATH}}\n"
                   "# `python -m launcher.injob` must not pick up a launcher/ folder in the submit directory.\n"
                   "export PYTHONSAFEPATH=1\n")
    out.append(f"SF_PYTHON={c['host_python']}\n")
    if array:
        out.append(_ARRAY_TASK.format(sweep_id=array["sweep_id"], size=array["size"]))
    if c["logger_lines"]:
        out.append("\n# -- one logger run across restarts: the same W&B run id in every attempt and on every node --\n")
        out += [f"{line}\n" for line in c["logger_lines"]]
    out.append(f"# -- what runs on the head once Ray is up ({c['launcher']}) --\nSF_ENTRY=(\n")
    out += [f"  {arg}\n" for arg in c["entry"]]
    out.append(")\n")
    if array:
        out.append("# the overrides of each point are in manifest.json (the supervisor reads them by task id)\n"
                   "SF_OVERRIDES=()\n")
    else:
        out.append("SF_OVERRIDES=(\n")
        out += [f"  {arg}\n" for arg in c["overrides"]]
        out.append(")\n")
    out.append('sf_phase() { "$SF_PYTHON" -m launcher.injob phase "$SF_RUN_DIR" "$@" || true; }\n\n')
    if c["requeue"]:
        out.append(_REQUEUE_TRAP.format(lead=c["signal_lead_s"]))
    out.append(_SUPERVISE)
    out += [f"  {arg} \\\n" for arg in c["supervise_args"]]
    out.append('  --n-entry "${#SF_ENTRY[@]}" -- "${SF_ENTRY[@]}" "${SF_OVERRIDES[@]}" &\n')
    out.append(_WAIT)
    return "".join(out)
