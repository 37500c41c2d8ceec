"""Export (verl checkpoint -> Hugging Face folder) and SFT evaluation jobs.

Login side (imports of launcher.* are done inside the functions):
  - `find_actor_dir(path, fmt)` checks a checkpoint's layout and says what is wrong;
  - `merge_argv(...)` is verl's merge command (`python -m verl.model_merger merge`);
  - `render_export(...)` / `render_eval(...)` render templates/export.sbatch.j2 and
    templates/eval.sbatch.j2 (pure: text out).

Job side: `python export.py evaluate ...` (run with runpy by the eval job, on the verl
runtime's Python, so this file imports only the standard library at module level).
It loads the exported model with transformers, and for every validation sample (the
run's own SFT data: a messages list whose last assistant turn is the reference, or
prompt/response columns) computes the reference's token NLL (what verl's val/loss is)
and a greedy generation, and writes samples.jsonl and summary.json.

verl checkpoint layout (verl/trainer/ppo/ray_trainer.py `_save_checkpoint`,
verl/model_merger/*.py):

    <checkpoints>/latest_checkpointed_iteration.txt        "N"
    <checkpoints>/global_step_N/actor/                     what the merger reads
        FSDP:     fsdp_config.json ({"world_size": W}), model_world_size_W_rank_R.pt
                  for R in 0..W-1, huggingface/config.json (+ tokenizer)
        Megatron: model/dist_ckpt/, model/huggingface/config.json
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

FORMATS = {"verl-fsdp": "fsdp", "verl-megatron": "megatron"}
TRACKER = "latest_checkpointed_iteration.txt"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")

VALID_LAYOUT = (
    "a valid --checkpoint is a verl checkpoints dir holding latest_checkpointed_iteration.txt, "
    "or one of its global_step_N dirs, or a global_step_N/actor dir"
)


class LayoutError(ValueError):
    """The checkpoint is not a verl checkpoint of the asked format. (The CLI turns it into
    a SpecError; this module's job side must not import launcher.)"""


@dataclass(frozen=True)
class Checkpoint:
    actor_dir: str  # <...>/global_step_N/actor (absolute)
    step: int | None
    fmt: str  # "verl-fsdp" | "verl-megatron"

    @property
    def backend(self) -> str:
        return FORMATS[self.fmt]


def _step_dirs(path: Path) -> list[int]:
    steps = []
    for child in path.iterdir() if path.is_dir() else ():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir():
            steps.append(int(match.group(1)))
    return sorted(steps)


def detect_format(actor: Path) -> str | None:
    if (actor / "fsdp_config.json").is_file() or any(actor.glob("model_world_size_*_rank_*.pt")):
        return "verl-fsdp"
    if (actor / "model" / "dist_ckpt").is_dir() or (actor / "model" / "huggingface").is_dir():
        return "verl-megatron"
    return None


def _check_fsdp(actor: Path) -> list[str]:
    missing = []
    config = actor / "fsdp_config.json"
    world_size = None
    if not config.is_file():
        missing.append("fsdp_config.json")
    else:
        try:
            world_size = int(json.loads(config.read_text())["world_size"])
        except (ValueError, KeyError, TypeError):
            missing.append("a world_size in fsdp_config.json")
    if world_size:
        for rank in range(world_size):
            name = f"model_world_size_{world_size}_rank_{rank}.pt"
            if not (actor / name).is_file():
                missing.append(name)
    elif not any(actor.glob("model_world_size_*_rank_*.pt")):
        missing.append("model_world_size_W_rank_R.pt shards")
    if not (actor / "huggingface" / "config.json").is_file():
        missing.append("huggingface/config.json")
    return missing


def _check_megatron(actor: Path) -> list[str]:
    missing = []
    if not (actor / "model" / "dist_ckpt").is_dir():
        missing.append("model/dist_ckpt/")
    if not (actor / "model" / "huggingface" / "config.json").is_file():
        if (actor / "huggingface" / "config.json").is_file():
            missing.append("model/huggingface/config.json (this is the pre-v2 Megatron layout: "
                           "run verl's scripts/migrate_megatron_checkpoint_layout.py first)")
        else:
            missing.append("model/huggingface/config.json")
    return missing


def _model_dir(step_dir: Path) -> Path:
    """Where a global_step_N dir keeps the model the merger reads: actor/ for the RL
    trainers, the step dir itself for verl's SFT trainer (it writes its FSDP shards
    straight into global_step_N/; seen on the H200)."""
    if not (step_dir / "actor").is_dir() and detect_format(step_dir):
        return step_dir
    return step_dir / "actor"


def find_actor_dir(path: str | os.PathLike, fmt: str | None = None) -> Checkpoint:
    """Resolve PATH (checkpoints dir, global_step_N dir or its actor dir) to the actor dir
    the merger reads, and check its files for `fmt` (detected when None)."""
    if fmt is not None and fmt not in FORMATS:
        raise LayoutError(f"--checkpoint-format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    root = Path(path).expanduser().absolute()
    if not root.exists():
        raise LayoutError(f"{root} does not exist; {VALID_LAYOUT}")
    if not root.is_dir():
        raise LayoutError(f"{root} is a file, not a directory; {VALID_LAYOUT}")
    step = None
    if (root / TRACKER).is_file():
        text = (root / TRACKER).read_text().strip()
        if not text.isdigit():
            raise LayoutError(f"{root / TRACKER} holds {text[:40]!r}, not a step number; pass a global_step_N dir instead")
        step = int(text)
        step_dir = root / f"global_step_{step}"
        if not step_dir.is_dir():
            have = ", ".join(f"global_step_{s}" for s in _step_dirs(root)) or "none"
            raise LayoutError(f"{root / TRACKER} says step {step} but {step_dir.name}/ is missing "
                              f"(found: {have}); pass one of them with --checkpoint")
        actor = _model_dir(step_dir)
    elif _STEP_DIR.match(root.name):
        step = int(_STEP_DIR.match(root.name).group(1))
        actor = _model_dir(root)
    elif root.name == "actor" and _STEP_DIR.match(root.parent.name):
        step = int(_STEP_DIR.match(root.parent.name).group(1))
        actor = root
    elif detect_format(root):
        actor = root  # an actor dir moved out of its global_step_N parent
    else:
        steps = _step_dirs(root)
        if steps:
            raise LayoutError(f"{root} has no {TRACKER} (verl writes it after a complete save); "
                              f"pass one of its steps, e.g. --checkpoint {root / f'global_step_{steps[-1]}'}")
        raise LayoutError(f"{root} holds no {TRACKER}, no global_step_N/ and no actor files; {VALID_LAYOUT}")
    if not actor.is_dir():
        raise LayoutError(f"{actor.parent} has no actor/ and no model shards (the merger reads "
                          f"global_step_N/actor, or global_step_N itself for SFT); {VALID_LAYOUT}")
    found = detect_format(actor)
    fmt = fmt or found
    if fmt is None:
        raise LayoutError(f"{actor} holds neither FSDP shards (fsdp_config.json, model_world_size_W_rank_R.pt) "
                          "nor a Megatron model/dist_ckpt/; is the save complete?")
    missing = _check_fsdp(actor) if fmt == "verl-fsdp" else _check_megatron(actor)
    if missing:
        hint = f"; it looks like {found}: use --checkpoint-format {found}" if found and found != fmt else ""
        raise LayoutError(f"{actor} is not a complete {fmt} checkpoint: missing {', '.join(missing)}{hint}")
    return Checkpoint(actor_dir=str(actor), step=step, fmt=fmt)


def merge_argv(ckpt: Checkpoint, target_dir: str, python: str = "python", extra=()) -> list[str]:
    """verl's merge command (verl/model_merger/__main__.py, base_model_merger.parse_args)."""
    return [python, "-m", "verl.model_merger", "merge", "--backend", ckpt.backend,
            "--local_dir", ckpt.actor_dir, "--target_dir", str(target_dir), *extra]


# --- rendering (pure) ---------------------------------------------------------------

def _env():
    import jinja2

    from launcher import paths

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(paths.templates_dir())),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["argv"] = lambda argv: " ".join(shlex.quote(str(a)) for a in argv)
    return env


@dataclass(frozen=True)
class JobResources:
    """The sbatch header of an export/eval job: one node, one task."""

    job_name: str
    log_path: str  # --output (may hold %j)
    partition: str | None = None
    gpus: int = 0
    gpu_directive: str = "gres"  # gres | gpus-per-node
    gres_name: str = "gpu"
    cpus: int = 2
    mem: str | None = None
    time: str = "01:00:00"
    account: str | None = None
    qos: str | None = None


def resources_for(site, *, job_name: str, log_path: str, gpus: int, partition: str | None = None,
                  time: str | None = None, cpus: int | None = None, mem: str | None = None) -> JobResources:
    """Header from the site: the default series' partition and GPU directive."""
    series = site.series.get(site.default_series or "") or next(iter(site.series.values()), None)
    return JobResources(
        job_name=job_name, log_path=log_path,
        partition=partition or (series.partition if series else None),
        gpus=gpus,
        gpu_directive=series.gpu_directive if series else "gres",
        gres_name=series.gres_name if series else "gpu",
        cpus=cpus or (min(series.cpus_per_node, 8) if series else 2),
        mem=mem or (series.mem_per_node if series else None),
        time=time or site.time, account=site.account, qos=site.qos,
    )


def check_resources(res: JobResources) -> JobResources:
    """Refuse header values that could break out of their #SBATCH line (same patterns as
    the training job's header in launcher.render); a SpecError names the field."""
    from launcher import render as r

    r._check(r._NAME, res.job_name, "job name", "letters, digits and ._- only")
    r._check(re.compile(r"^/[A-Za-z0-9._/+%-]*$"), res.log_path, "log path",
             "an absolute path of letters, digits and ._/+-% only; choose another runs_dir")
    r._check(r._TIME, res.time, "--time", "use HH:MM:SS, MM or D-HH:MM")
    for field, value in (("--partition", res.partition), ("slurm.account", res.account), ("slurm.qos", res.qos)):
        if value is not None:
            r._check(r._ACCOUNTISH, value, field, "letters, digits and ._- only")
    if res.mem is not None:
        r._check(r._MEM, res.mem, "mem_per_node", "a number with K, M, G or T, e.g. 64G")
    r._check(r._GRES, res.gres_name, "gres_name", "letters, digits, _ and - only")
    r._int(res.gpus, "--gpus")
    r._int(res.cpus, "cpus", minimum=1)
    return res


def _same(argv):
    return list(argv)


def _one_line(**values) -> None:
    """Paths and ids are shell-quoted in the scripts; a line break is refused outright
    (it could end a quoted word's line in an echo or a comment)."""
    from launcher.errors import SpecError

    for field, value in values.items():
        if value is not None and ("\n" in str(value) or "\r" in str(value)):
            raise SpecError(field.replace("_", "-"), f"{str(value)!r} holds a line break; use a plain path")


def render_export(*, res: JobResources, setup: list[str], env: dict, ckpt: Checkpoint, target_dir: str,
                  sf_python: str, run_dir: str | None, export_id: str, extra=(), wrap=_same) -> str:
    """`wrap(argv)` turns a `python ...` argv into how it runs on the runtime (the venv's
    python, `apptainer exec ...`, an srun step with a pyxis image)."""
    _one_line(checkpoint=ckpt.actor_dir, target=target_dir, run_dir=run_dir, export_id=export_id)
    return _env().get_template("export.sbatch.j2").render(
        res=check_resources(res), setup=list(setup), env=dict(env), ckpt=ckpt, target_dir=target_dir,
        merge=wrap(merge_argv(ckpt, target_dir, python="python", extra=extra)),
        sf_python=sf_python, run_dir=run_dir, export_id=export_id,
    )


def render_eval(*, res: JobResources, setup: list[str], env: dict, run_dir: str, eval_id: str,
                out_dir: str, model_dir: str, data: str, ckpt: Checkpoint | None, sf_python: str,
                options: dict, wrap=_same) -> str:
    _one_line(run_dir=run_dir, eval_id=eval_id, out_dir=out_dir, model=model_dir, validation_data=data,
              checkpoint=ckpt.actor_dir if ckpt else None)
    evaluate = ["python", "-c",
                "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')",
                str(Path(__file__).resolve()), "evaluate", "--model", model_dir, "--data", data,
                "--out", out_dir]
    for key, value in options.items():
        if value is not None:
            evaluate += [f"--{key.replace('_', '-')}", str(value)]
    return _env().get_template("eval.sbatch.j2").render(
        res=check_resources(res), setup=list(setup), env=dict(env), run_dir=run_dir, eval_id=eval_id, out_dir=out_dir,
        model_dir=model_dir, data=data, ckpt=ckpt,
        merge=wrap(merge_argv(ckpt, model_dir, python="python")) if ckpt else None,
        evaluate=wrap(evaluate), sf_python=sf_python,
    )


# --- job side: evaluation -------------------------------------------------------------

def read_rows(path: str) -> list[dict]:
    """Rows of a parquet, jsonl or json file (a list of objects)."""
    p = Path(path)
    if p.suffix == ".parquet":
        import pandas  # the verl runtime has it (verl requires pandas and pyarrow)

        return pandas.read_parquet(p).to_dict(orient="records")
    text = p.read_text()
    if p.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    return data if isinstance(data, list) else data.get("data", [])


def _plain(value):
    """numpy arrays / scalars from parquet -> plain Python."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def split_sample(row: dict, messages_key: str, prompt_key: str, response_key: str):
    """-> (prompt messages, reference text). verl's SFT data is a messages list (the
    reference is the last assistant turn) or a prompt/response pair."""
    row = _plain(row)
    messages = row.get(messages_key)
    if isinstance(messages, list) and messages:
        last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
        if last is None:
            raise ValueError(f"sample has no assistant turn in {messages_key!r}")
        return messages[:last], str(messages[last].get("content", ""))
    if prompt_key in row and response_key in row:
        prompt = row[prompt_key]
        if isinstance(prompt, list):
            return prompt, str(row[response_key])
        return [{"role": "user", "content": str(prompt)}], str(row[response_key])
    raise ValueError(f"sample has neither {messages_key!r} nor {prompt_key!r}/{response_key!r}: keys {sorted(row)}")


def _prompt_ids(tokenizer, messages) -> list[int]:
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)
    text = "\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages) + "\nassistant: "
    return tokenizer(text, add_special_tokens=True)["input_ids"]


def evaluate(model_dir: str, data: str, out_dir: str, *, messages_key="messages", prompt_key="prompt",
             response_key="response", max_samples=64, max_new_tokens=128) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32 if device == "cpu" else "auto")
    model.to(device).eval()
    rows = read_rows(data)[: max_samples if max_samples and max_samples > 0 else None]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    total_nll, total_tokens, exact = 0.0, 0, 0
    with open(out / "samples.jsonl", "w", encoding="utf-8") as handle:
        for index, row in enumerate(rows):
            prompt, reference = split_sample(row, messages_key, prompt_key, response_key)
            prompt_ids = _prompt_ids(tokenizer, prompt)
            ref_ids = tokenizer(reference, add_special_tokens=False)["input_ids"]
            if tokenizer.eos_token_id is not None:
                ref_ids = ref_ids + [tokenizer.eos_token_id]
            ids = torch.tensor([prompt_ids + ref_ids], device=device)
            with torch.no_grad():
                logits = model(ids).logits[0, len(prompt_ids) - 1: -1].float()
                nll = torch.nn.functional.cross_entropy(logits, ids[0, len(prompt_ids):], reduction="sum").item()
                generated = model.generate(
                    torch.tensor([prompt_ids], device=device), max_new_tokens=max_new_tokens, do_sample=False,
                    pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
                )[0, len(prompt_ids):]
            text = tokenizer.decode(generated, skip_special_tokens=True)
            match = text.strip() == reference.strip()
            exact += match
            total_nll += nll
            total_tokens += len(ref_ids)
            handle.write(json.dumps({
                "index": index, "prompt": prompt, "reference": reference, "generated": text,
                "nll": nll, "tokens": len(ref_ids), "loss": nll / max(len(ref_ids), 1), "exact_match": match,
            }, ensure_ascii=False) + "\n")
    summary = {
        "model": model_dir, "data": data, "samples": len(rows), "device": device,
        "val_loss": total_nll / max(total_tokens, 1), "exact_match": exact / max(len(rows), 1),
        "max_new_tokens": max_new_tokens, "samples_file": str(out / "samples.jsonl"),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="export.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="op", required=True)
    ev = sub.add_parser("evaluate", help="evaluate an HF model on SFT validation samples")
    ev.add_argument("--model", required=True)
    ev.add_argument("--data", required=True)
    ev.add_argument("--out", required=True)
    ev.add_argument("--messages-key", default="messages")
    ev.add_argument("--prompt-key", default="prompt")
    ev.add_argument("--response-key", default="response")
    ev.add_argument("--max-samples", type=int, default=64)
    ev.add_argument("--max-new-tokens", type=int, default=128)
    chk = sub.add_parser("check", help="check a checkpoint layout")
    chk.add_argument("path")
    chk.add_argument("--checkpoint-format", default=None)
    args = parser.parse_args(argv)
    if args.op == "check":
        try:
            print(json.dumps(find_actor_dir(args.path, args.checkpoint_format).__dict__))
        except LayoutError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    summary = evaluate(args.model, args.data, args.out, messages_key=args.messages_key,
                       prompt_key=args.prompt_key, response_key=args.response_key,
                       max_samples=args.max_samples, max_new_tokens=args.max_new_tokens)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
