"""verl's checkpoint layout, for both sides (standard library only: the export job runs it
on the runtime's Python, `python -m launcher.injob checkpoint` / `export-preflight`).

  - `find_actor_dir(path, fmt)` checks a checkpoint's layout and says what is wrong;
  - `merge_argv(...)` is verl's merge command (`python -m verl.model_merger merge`);
  - `LaterCheckpoint`: a run's last checkpoint that the export job looks up itself (it does
    not exist yet when `sf submit --model run:RUN` queues the export; launcher.submit.chain);
  - `preflight_report(...)`: what an export preflight finds, without merging.

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
import stat
from dataclasses import dataclass
from pathlib import Path

from launcher import gateway

FORMATS = {"verl-fsdp": "fsdp", "verl-megatron": "megatron"}
TRACKER = "latest_checkpointed_iteration.txt"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_SHARD = re.compile(r"model_world_size_.*_rank_.*\.pt")

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


# What the export job substitutes when it looks the checkpoint up itself (LaterCheckpoint):
# plain words that shlex leaves unquoted, replaced by quoted shell variables in the script.
ACTOR_SLOT, BACKEND_SLOT = "@SF_ACTOR_DIR@", "@SF_BACKEND@"


@dataclass(frozen=True)
class LaterCheckpoint:
    """The last checkpoint in `checkpoints_dir`, looked up by the export job when it runs
    (after the training job ended): nothing is there when the export is queued."""

    checkpoints_dir: str  # absolute
    fmt: str | None = None  # None: detected by the job from the files
    step = None

    @property
    def actor_dir(self) -> str:
        return ACTOR_SLOT

    @property
    def backend(self) -> str:
        return BACKEND_SLOT


def _listing(path: Path) -> list[tuple[str, os.stat_result]]:
    """(name, lstat) of what is in the folder `path`, walked by launcher.gateway (another user's link
    on the way: a LayoutError naming it); [] when it is absent or not a folder."""
    try:
        return gateway.entries(path, "--checkpoint")
    except gateway.UnsafeFile as exc:
        raise LayoutError(exc.message) from None
    except OSError:
        return []


def _is_dir(path: Path) -> bool:
    """`path` is a folder, reached through no other user's link (which is a LayoutError naming it)."""
    try:
        gateway.resolve(path, "--checkpoint")
    except (FileNotFoundError, NotADirectoryError):
        return False
    except gateway.UnsafeFile as exc:
        if exc.kind:  # a file or a FIFO where a folder should be
            return False
        raise LayoutError(exc.message) from None
    return True


def _is_file(path: Path) -> bool:
    """`path` is a regular file itself (not a link to one), its folders walked as _is_dir walks them."""
    try:
        return stat.S_ISREG(gateway.lstat(path, "--checkpoint").st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except gateway.UnsafeFile as exc:
        if exc.kind:
            return False
        raise LayoutError(exc.message) from None


def _has_shards(actor: Path) -> bool:
    return any(_SHARD.fullmatch(name) for name, _ in _listing(actor))


def _step_dirs(path: Path) -> list[int]:
    """The N of each global_step_N folder in `path` (a link by that name is not one)."""
    return sorted(int(m.group(1)) for name, st in _listing(path)
                  if (m := _STEP_DIR.match(name)) and stat.S_ISDIR(st.st_mode))


def detect_format(actor: Path) -> str | None:
    if _is_file(actor / "fsdp_config.json") or _has_shards(actor):
        return "verl-fsdp"
    if _is_dir(actor / "model" / "dist_ckpt") or _is_dir(actor / "model" / "huggingface"):
        return "verl-megatron"
    return None


# The most bytes sf reads of a checkpoint's small files (the tracker, fsdp_config.json), and the
# largest step and world size it takes from them: beyond these a file is damaged, not a checkpoint.
SMALL_FILE_BYTES = 65536
MAX_STEP = 10**12
MAX_WORLD_SIZE = 1 << 20


def _read_small(path: Path, any_owner: bool = True) -> str:
    """A checkpoint's small text file, read through launcher.gateway from the descriptor it checked
    (a regular file: never a link, a FIFO or a device; at most SMALL_FILE_BYTES; another user's
    checkpoint may be read unless not `any_owner`), or a LayoutError naming it (unreadable, too big, binary)."""
    try:
        raw = gateway.read_bytes(path, "--checkpoint", limit=SMALL_FILE_BYTES, any_owner=any_owner)
    except gateway.UnsafeFile as exc:
        if exc.kind == "too large":
            raise LayoutError(f"{path} is {exc.size or 'over ' + str(SMALL_FILE_BYTES)} bytes, over the "
                              f"{SMALL_FILE_BYTES} bytes of such a file: it is damaged (verl writes a few bytes); fix "
                              "or remove it, or pass a global_step_N dir") from None
        raise LayoutError(f"{exc.message}, or pass a global_step_N dir") from None
    except OSError as exc:
        raise LayoutError(f"cannot read {path}: {exc.strerror}; fix its permissions or pass a global_step_N "
                          "dir") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LayoutError(f"{path} is not text (a binary file): it is damaged; fix or remove it, "
                          "or pass a global_step_N dir") from None


def read_tracker(path: Path, any_owner: bool = True) -> int:
    """The step in latest_checkpointed_iteration.txt: ASCII digits only (not '٣' or '²', which
    str.isdigit takes), at most MAX_STEP; else a LayoutError naming the file."""
    text = _read_small(path, any_owner).strip()
    if not re.fullmatch(r"[0-9]{1,13}", text) or int(text) > MAX_STEP:
        shown = text[:40] + ("..." if len(text) > 40 else "")
        raise LayoutError(f"{path} holds {shown!r}, not a step number (verl writes the last saved step, e.g. 200); "
                          "fix the file or pass a global_step_N dir instead")
    return int(text)


def tracked_step(checkpoint_dir) -> int | None:
    """The step verl resumes from (resume_mode=auto) in a run's checkpoints dir: its
    tracker's, read as read_tracker reads it; None when there is none yet or it is damaged
    (the supervisor's restarts and the preflight's report read it here, export and eval
    through checkpoint_layout)."""
    try:
        return read_tracker(Path(checkpoint_dir) / TRACKER, any_owner=False)  # the run's own: verl's file
    except LayoutError:  # absent, damaged, not a regular file, another user's
        return None


def read_world_size(config: Path) -> int:
    """`world_size` of fsdp_config.json: a whole number from 1 to MAX_WORLD_SIZE (a bigger one
    would have sf check 10**12 shard files), else a LayoutError naming the file."""
    text = _read_small(config)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise LayoutError(f"{config} is not JSON: it is damaged; fix it (verl writes {{\"world_size\": W}})") from None
    value = data.get("world_size") if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORLD_SIZE:
        raise LayoutError(f"{config} has world_size {value!r}: not a number of ranks from 1 to {MAX_WORLD_SIZE}; "
                          "fix it to the number of model_world_size_W_rank_R.pt shards")
    return value


def _check_fsdp(actor: Path) -> list[str]:
    missing = []
    config = actor / "fsdp_config.json"
    world_size = None
    if not _is_file(config):
        missing.append("fsdp_config.json")
    else:
        world_size = read_world_size(config)
    if world_size:  # one listing of the folder, not one stat per rank
        shard = re.compile(rf"model_world_size_{world_size}_rank_([0-9]+)\.pt")
        have = {int(m.group(1)) for name, st in _listing(actor) if (m := shard.fullmatch(name))
                and stat.S_ISREG(st.st_mode)}
        absent = [rank for rank in range(world_size) if rank not in have]
        names = [f"model_world_size_{world_size}_rank_{rank}.pt" for rank in absent[:5]]
        missing += names + ([f"{len(absent) - 5} more shards"] if len(absent) > 5 else [])
    elif not _has_shards(actor):
        missing.append("model_world_size_W_rank_R.pt shards")
    if not _is_file(actor / "huggingface" / "config.json"):
        missing.append("huggingface/config.json")
    return missing


def _check_megatron(actor: Path) -> list[str]:
    missing = []
    if not _is_dir(actor / "model" / "dist_ckpt"):
        missing.append("model/dist_ckpt/")
    if not _is_file(actor / "model" / "huggingface" / "config.json"):
        if _is_file(actor / "huggingface" / "config.json"):
            missing.append("model/huggingface/config.json (this is the pre-v2 Megatron layout: "
                           "run verl's scripts/migrate_megatron_checkpoint_layout.py first)")
        else:
            missing.append("model/huggingface/config.json")
    return missing


def _model_dir(step_dir: Path) -> Path:
    """Where a global_step_N dir keeps the model the merger reads: actor/ for the RL
    trainers, the step dir itself for verl's SFT trainer (it writes its FSDP shards
    straight into global_step_N/; seen on the H200)."""
    if not _is_dir(step_dir / "actor") and detect_format(step_dir):
        return step_dir
    return step_dir / "actor"


def find_actor_dir(path: str | os.PathLike, fmt: str | None = None) -> Checkpoint:
    """Resolve PATH (checkpoints dir, global_step_N dir or its actor dir) to the actor dir
    the merger reads, and check its files for `fmt` (detected when None)."""
    if fmt is not None and fmt not in FORMATS:
        raise LayoutError(f"--checkpoint-format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    expanded = os.path.expanduser(str(path))  # pathlib's expanduser raises for an unknown ~USER
    if expanded.startswith("~"):
        raise LayoutError(f"{path}: this machine knows no user {str(path)[1:].partition('/')[0]!r}; "
                          "write the path in full")
    root = Path(expanded).absolute()
    if not _is_dir(root):
        if not os.path.exists(root):  # words only: the walk above decided
            raise LayoutError(f"{root} does not exist; {VALID_LAYOUT}")
        raise LayoutError(f"{root} is a file, not a directory; {VALID_LAYOUT}")
    step = None
    if os.path.lexists(root / TRACKER):  # root was walked above; a FIFO or link there: read_tracker says so
        step = read_tracker(root / TRACKER)
        step_dir = root / f"global_step_{step}"
        if not _is_dir(step_dir):
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
    if not _is_dir(actor):
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


def preflight_report(checkpoint: str, fmt: str | None, target: str, merger: str,
                     upstream_preflight: bool = False) -> dict:
    """The export job's preflight (job side): the checkpoint it would merge (looked up now),
    verl's merger on the runtime (`merger`: its path, found by FIND_MERGER, or empty), the
    target folder (made, writable, holding no model yet). Merges nothing; writes nothing
    but the target folder. `failures` empty means a real export would get to the merge."""
    failures = []
    try:
        ck = find_actor_dir(checkpoint, fmt)
        found = {"found": True, "actor_dir": ck.actor_dir, "step": ck.step, "format": ck.fmt}
    except LayoutError as exc:
        found = {"found": False, "note": str(exc)}
        if upstream_preflight:  # what a preflight chain can honestly say: nothing was trained
            found["note"] = ("the run is a preflight: it trained and saved nothing; a real chain merges its last "
                             "global_step_N here")
        else:
            failures.append(f"checkpoint: {exc}")
    if not merger:
        failures.append("verl's model merger (verl/model_merger/__main__.py) is not on the runtime")
    target_report = {"dir": target}
    try:
        os.makedirs(target, exist_ok=True)
        target_report["writable"] = os.access(target, os.W_OK)
        if not target_report["writable"]:
            failures.append(f"target: {target} is not writable")
    except OSError as exc:
        target_report["writable"] = False
        failures.append(f"target: cannot make {target}: {exc}")
    if os.path.isfile(os.path.join(target, "config.json")):
        failures.append(f"target: {target} already holds a model (config.json)")
    return {"checkpoint": found, "merger": merger or None, "target": target_report, "merged": False,
            "failures": failures}
