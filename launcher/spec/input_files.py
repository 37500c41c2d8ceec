"""The files an experiment names: models, data and the reward function, made absolute (compute
nodes have another cwd) and checked before anything is submitted. Part of loading a spec
(launcher.spec.experiment); the I/O edge of the compiler."""

from __future__ import annotations

import ast
import errno
import os
import re
import stat
from pathlib import Path
from typing import Any

from launcher.errors import SpecError
from launcher.spec.files import expand_user
from launcher.spec.layers import Layer
from launcher.spec.site import Site


def check_reward_function(path: str, name: str, field_name: str = "reward.function.path") -> SpecError | None:
    """verl imports the reward file and takes `name` from it at start-up: fail here instead.
    The file is read with ast, never imported."""
    if re.match(r"^[a-z][a-z0-9+.-]*://", path):
        return None
    p = Path(path)
    fix = "set reward.function.path to your reward file (relative paths are relative to the experiment folder)"
    try:
        mode = os.stat(p).st_mode
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return SpecError(field_name, f"{path} does not exist; {fix}")
        return SpecError(field_name, f"cannot read {path}: {exc.strerror}; fix its permissions or {fix}")
    if stat.S_ISDIR(mode):
        return SpecError(field_name, f"{path} is a directory, not a Python file; set reward.function.path to the "
                         f"reward file in it (e.g. {path.rstrip('/')}/reward.py)")
    if not stat.S_ISREG(mode):  # never opened: a FIFO would block the read, a device is no source
        return SpecError(field_name, f"{path} is not a regular file (a FIFO, socket or device); {fix}")
    try:
        tree = ast.parse(p.read_text(), filename=str(p))
    except SyntaxError as exc:
        return SpecError(field_name, f"{path} does not parse (line {exc.lineno}: {exc.msg}); fix the file")
    except (OSError, UnicodeDecodeError) as exc:
        return SpecError(field_name, f"cannot read {path} ({exc}); fix the file's permissions or encoding")
    defined = set()
    functions = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
            functions.append(node.name)
        elif isinstance(node, ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(target, ast.Name):
                    defined.add(target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    if name not in defined:
        return SpecError("reward.function.name", f"{path} defines no function {name!r} (verl fails at start-up); "
                         f"functions there: {', '.join(functions) or 'none'}; set reward.function.name")
    return None


def as_list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


def abs_files(files, base: Path, field_name: str) -> Any:
    out = []
    for f in as_list(files):
        if re.match(r"^[a-z][a-z0-9+.-]*://", f):  # hdfs://, s3://: leave to verl
            out.append(f)
        else:
            p = expand_user(f, field_name)
            out.append(str((base / p).resolve()) if not p.is_absolute() else str(p))
    return out[0] if len(out) == 1 else out


def model_path(model: str, base: Path, field_name: str) -> str:
    """Local paths become absolute (compute nodes have another cwd); a HF id stays as is."""
    p = expand_user(model, field_name)
    try:
        local = (base / p).exists()
    except OSError as exc:  # a name past the file system's limit: neither a folder here nor a HF id
        raise SpecError(field_name, f"{model[:60]!r}... ({len(model)} characters) is no model folder ({exc.strerror}) "
                        "and no Hugging Face id; pass a model path or an id such as Qwen/Qwen2.5-0.5B") from None
    if model.startswith(("/", "./", "../", "~")) or local:
        return str((base / p).resolve()) if not p.is_absolute() else str(p)
    return model


def resolve_dataset(text: str, site: Site) -> Path:
    """OWNER/NAME@VERSION -> <root>/OWNER/NAME/VERSION/ under the site's dataset_roots."""
    m = re.fullmatch(r"^([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)@([A-Za-z0-9_.-]+)$", text or "")
    if not m:
        raise SpecError("data.train.dataset", f"{text!r} is not OWNER/NAME@VERSION (e.g. alice/gsm8k-zh@v2)")
    owner, name, version = m.groups()
    if not site.dataset_roots:
        raise SpecError("data.train.dataset", f"site {site.name} has no dataset_roots; use --train-data PATH instead")
    versions: set[str] = set()
    for root in site.dataset_roots:
        d = Path(root) / owner / name
        if (d / version).is_dir():
            return d / version
        if d.is_dir():
            versions.update(p.name for p in d.iterdir() if p.is_dir())
    if versions:
        raise SpecError("data.train.dataset", f"{owner}/{name} has no version {version!r}; versions: "
                                              f"{', '.join(sorted(versions))}")
    raise SpecError("data.train.dataset", f"unknown dataset {owner}/{name} in {', '.join(site.dataset_roots)}")


def dataset_files(ds_dir: Path, files) -> Any:
    names = as_list(files)
    if not names:
        found = sorted(p.name for p in ds_dir.iterdir() if p.suffix in (".parquet", ".jsonl", ".json"))
        if len(found) == 1:
            names = found
        elif "train.parquet" in found:
            names = ["train.parquet"]
        else:
            raise SpecError("data.train.files", f"dataset {ds_dir} holds {', '.join(found) or 'no data files'}; "
                            "pick one with --train-data FILE")
    out = [n if Path(n).is_absolute() else str(ds_dir / n) for n in names]
    return out[0] if len(out) == 1 else out


def data_files(values: dict, origins: dict, site: Site, exp_dir: Path, cwd: Path) -> str | None:
    """Data files made absolute in `values` (a flag's against the cwd, config.yaml's against
    the experiment folder; a dataset's inside its version folder). The dataset folder, if any.
    `origins`: where each came from (launcher.spec.layers.Origin)."""
    dataset_dir = None
    train = (values.get("data") or {}).get("train") or {}
    from_cli_files = _layer(origins, "data.train.files") is Layer.SET  # --train-data
    if train.get("dataset"):
        ds = resolve_dataset(train["dataset"], site)
        dataset_dir = str(ds)
        train["files"] = dataset_files(ds, train.get("files"))
    elif train.get("files") is not None:
        train["files"] = abs_files(train["files"], cwd if from_cli_files else exp_dir,
                                    "--train-data" if from_cli_files else "data.train.files")
    val = (values.get("data") or {}).get("validation") or {}
    if val.get("files") is not None and _layer(origins, "data.validation.files") is Layer.CONFIG:
        val["files"] = abs_files(val["files"], exp_dir, "data.validation.files")
    return dataset_dir


def _layer(origins: dict, dotted: str) -> Layer | None:
    origin = origins.get(dotted)
    return origin.layer if origin is not None else None
