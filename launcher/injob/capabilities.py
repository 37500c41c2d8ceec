"""What a method needs from the runtime beyond verl itself, checked in the runtime's own
interpreter before it can cost a run (issue 22, item 5).

The method catalog names the needs (configs/methods/verl/<version>/<method>.yaml `needs:`)
and the composed config adds its own (launcher.compile.compiler.runtime_needs: a model whose
attention is flash_attention_2 needs flash-attn, a rollout whose weights sync over nccl needs
cupy); the compiler writes them into the Plan (plan.json `runtime_needs`). Each name is a
capability below: the module that must import in the runtime, why the method needs it, and
the fix. The check imports the modules in a fresh runtime python (`-c`), not here: the
supervisor may run on the host's python (a container runtime), and a broken build (a
flash-attn compiled for another torch) fails only on import, not on find_spec.

  - `--preflight`: preflight.py reports every capability (preflight.json "capabilities") and
    fails with one line per missing one;
  - a real job: the supervisor refuses before Ray starts (check_early), with the same line,
    instead of failing minutes into verl with a misleading last line.

Standard library only.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from launcher import states
from launcher.injob import json_lines
from launcher.injob.contract import Contract, UnreadableContract


@dataclass(frozen=True)
class Capability:
    module: str  # what must import in the runtime
    package: str  # what to install
    why: str  # the verl code that needs it, short: the reason line holds it whole
    instead: str  # the way out when it cannot be installed


CAPABILITIES = {
    # verl 0.9.1's load_valuehead_model (verl/utils/model.py) passes
    # attn_implementation="flash_attention_2" whatever the attention overrides say
    "flash_attn": Capability(
        module="flash_attn", package="flash-attn",
        why="verl 0.9.1 loads the critic with flash_attention_2 hard-coded: utils/model.py load_valuehead_model",
        # which methods have a critic is their recipes' (configs/methods/, `critic: true`)
        instead="pick a method without a critic (`sf new --help` lists the methods; those whose recipe "
                "says `critic: true` have one)"),
    # the trained model's attention, from the composed config (compiler.runtime_needs): verl
    # 0.9.1 asks transformers for flash_attention_2 unless override_config names another
    "flash_attention_2": Capability(
        module="flash_attn", package="flash-attn",
        why="verl 0.9.1 builds the model with attn_implementation flash_attention_2 when "
            "override_config names none: workers/config/model.py",
        instead="set +actor_rollout_ref.model.override_config.attn_implementation=sdpa (SFT: "
                "+model.override_config.attn_implementation=sdpa), for every run through the runtime "
                "registry entry's `overrides:`"),
    # the rollout pool's weight sync (one-step-off, fully async): verl 0.9.1 imports cupy when
    # the trainer builds the checkpoint engine, after every model has loaded
    "cupy": Capability(
        module="cupy", package="cupy-cuda12x or cupy-cuda13x (the CUDA of the runtime's torch)",
        why="verl 0.9.1 syncs the rollout pool's weights over nccl with cupy: "
            "checkpoint_engine/nccl_checkpoint_engine.py",
        instead="run the rollout colocated (verl/grpo)"),
}
CHECKED = states.CAPABILITIES_CHECKED  # the phase it records
PROBE_TIMEOUT_S = 180  # importing torch and flash-attn on a loaded node takes seconds, not minutes

# Runs in the runtime's python: every module imported, each one's error (or null) as one JSON line.
PROBE = """import importlib, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        out[name] = None
    except BaseException as exc:
        out[name] = (exc.__class__.__name__ + ': ' + str(exc)).splitlines()[0][:200]
print('SF_CAPABILITIES ' + json.dumps(out), flush=True)
"""


def needs_of(contract: Contract) -> tuple[str, str, list[str]]:
    """(method label, runtime label, needs) from the job's contract (plan.json)."""
    plan, runtime = contract.plan, contract.runtime
    label = runtime.get("path") or runtime.get("image") or runtime.get("python") or "the runtime"
    return f"{plan.framework}/{plan.method}", label, [str(n) for n in plan.runtime_needs]


def probe_argv(python_argv: list[str], needs: list[str]) -> list[str]:
    modules = [CAPABILITIES[n].module for n in needs if n in CAPABILITIES]
    return [*python_argv, "-c", PROBE, *modules]


def parse_probe(output: str) -> dict | None:
    return json_lines.last_object(output, "SF_CAPABILITIES ")


def report(needs: list[str], imported: dict | None, probe_error: str = "") -> dict:
    """{capability: {"ok", "module", "error"}} from the probe's answer (None: it gave none)."""
    out = {}
    for name in needs:
        cap = CAPABILITIES.get(name)
        if cap is None:
            out[name] = {"ok": False, "module": None, "error": f"unknown capability {name!r} (sf knows: "
                                                                 f"{', '.join(sorted(CAPABILITIES))})"}
        elif imported is None:
            out[name] = {"ok": False, "module": cap.module,
                         "error": f"the runtime's python did not answer the import check: {probe_error or '?'}"}
        else:
            error = imported.get(cap.module, "not checked")
            out[name] = {"ok": error is None, "module": cap.module, "error": error}
    return out


def reasons(result: dict, method: str, runtime: str) -> list[str]:
    """One line per missing capability: what, which method, why, and the fix."""
    lines = []
    for name, entry in result.items():
        if entry["ok"]:
            continue
        cap = CAPABILITIES.get(name)
        if cap is None:
            lines.append(f"runtime capability {name}: {entry['error']}")
            continue
        # the fix first; the line is kept whole in the reason (failure_text.PREFLIGHT_REASON_CHARS: the
        # H200 run's lost its "why" at the 300 characters kept before)
        lines.append(f"runtime capability {name} missing: {method} needs it. Fix: install {cap.package} in the "
                     f"runtime ({runtime}), or {cap.instead}. "
                     f"`import {cap.module}` there: {entry['error']}. Why: {cap.why}")
    return lines


def check(python_argv: list[str], needs: list[str], *, popen=subprocess.Popen, env=None) -> dict:
    """Run the probe with `python_argv` (the runtime's python, however it is entered)."""
    if not needs:
        return {}
    try:
        proc = popen(probe_argv(python_argv, needs), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                     stdin=subprocess.DEVNULL, env=env)
        out, _ = proc.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return report(needs, None, f"no answer within {PROBE_TIMEOUT_S}s")
    except OSError as exc:
        return report(needs, None, f"{exc.__class__.__name__}: {exc}")
    text = out.decode(errors="replace") if isinstance(out, bytes) else (out or "")
    imported = parse_probe(text)
    tail = " | ".join(line for line in text.splitlines()[-3:] if line.strip())[-300:]
    return report(needs, imported, tail)


def preflight(run_dir: str, python: str) -> tuple[dict, list[str]]:
    """The preflight's check (it runs in the runtime's python already): (report, failures)."""
    try:
        contract = Contract.read(run_dir)
    except UnreadableContract:  # no plan.json, or one of an older sf: nothing is known to be needed
        return {}, []
    method, runtime, needs = needs_of(contract)
    result = check([python], needs)
    return result, reasons(result, method, runtime)


def summary(result: dict) -> str:
    return "capabilities: " + (", ".join(f"{name} {'ok' if e['ok'] else 'MISSING'}" for name, e in result.items())
                               or "none needed")


def check_early(contract, runtime, env: dict, head_node: str, hetjob: bool) -> tuple[dict, list[str]] | None:
    """The supervisor's check before Ray starts (a real job; --preflight reports it itself,
    beside its other checks): (the probe's result, the reasons the job must not start: []
    to go on), or None when the method needs no capability. `runtime` is the job's
    launcher.runtime.Runtime; a container runtime's probe is a one-task srun step on the head."""
    method, label, needs = needs_of(contract)
    if not needs:
        return None
    from launcher import slurm  # only here: the probe of a container runtime is an srun step

    python = [runtime.runtime_python()]
    local = runtime.local_argv(python)
    if local is not None:
        result = check(local, needs, env=env)
    else:
        result = check(runtime.wrap(python), needs, env=env, popen=lambda argv, **kw: slurm.srun_popen(
            argv, nodes=1, ntasks=1, nodelist=head_node, overlap=True, extra=runtime.srun_flags(),
            het_group=0 if hetjob else None, **kw))
    return result, reasons(result, method, label)
