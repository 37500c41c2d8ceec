"""Each input -> the verl keys it reaches, in its layer: the bindings (model, data, reward
function), the knobs, raw overrides, the runtime's defaults, the entry."""

from __future__ import annotations

import difflib
import os

from launcher import verlcheck
from launcher.compile import catalog
from launcher.compile.knobs import KNOBS, POLICY_LOSS_MODES, coerce_knob, knob_key
from launcher.compile.rules.owned import is_legacy, legacy_rewrite
from launcher.compile.values import flatten, parse_scalar, parse_value
from launcher.errors import SpecError
from launcher.spec.experiment import check_reward_function, close_knobs, split_override
from launcher.spec.layers import Layer


def rule_bindings(ctx) -> None:
    """--model / --train-data / --validation-data -> verl's keys; model and training data are required."""
    v = ctx.values
    model = v.get("model")
    train = ((v.get("data") or {}).get("train") or {}).get("files")
    val = ((v.get("data") or {}).get("validation") or {}).get("files")
    if not model:
        ctx.error("model", "no model: pass --model PATH_OR_HF_ID or set `model:` in config.yaml")
    if not train:
        ctx.error("data.train.files", "no training data: pass --train-data FILE (or --train-dataset "
                                      "OWNER/NAME@VERSION) or set data.train.files")
    om = ctx.origin_of("model")
    has_dataset = ((v.get("data") or {}).get("train") or {}).get("dataset")
    ot = ctx.origin_of("data.train.dataset" if has_dataset else "data.train.files")
    ov = ctx.origin_of("data.validation.files")
    if model:
        for key in (["model.path"] if ctx.sft else
                    ["actor_rollout_ref.model.path", *(["critic.model.path"] if ctx.method.critic else [])]):
            ctx.set(key, model, Layer.BINDING, origin=om)
    if train:
        ctx.set("data.train_files", train, Layer.BINDING, origin=ot)
    if val:
        ctx.set("data.val_files", val, Layer.BINDING, origin=ov)
    elif train:
        # verl's default val_files points at a GSM8K path that does not exist on the cluster:
        # SFT validates nothing then, RL validates on the training data.
        ctx.set("data.val_files", None if ctx.sft else train, Layer.BINDING, origin=ot)


def rule_no_validation(ctx) -> None:
    """Without validation data, validation is turned off (verl's default val_files does not exist)."""
    if not ctx.get("data.train_files") or ((ctx.values.get("data") or {}).get("validation") or {}).get("files"):
        return
    user = {key for _source, key in ctx.user_keys()}
    if "trainer.test_freq" not in user:
        ctx.set("trainer.test_freq", -1, Layer.SF)
    if not ctx.sft and "trainer.val_before_train" not in user:
        ctx.set("trainer.val_before_train", False, Layer.SF)
    ctx.warn("no validation data: " + ("validation is off" if ctx.sft else "data.val_files reuses the training file "
             "(verl needs one) and validation " + ("scores it (trainer.test_freq is set)" if "trainer.test_freq" in user
                                                   else "is off (test_freq=-1)")) + "; pass --validation-data FILE")


def rule_knobs(ctx) -> None:
    """Method defaults, then the knobs of each layer (configs/defaults.yaml, site, config.yaml,
    --set, the sweep point), each translated to its Hydra key and typed; a knob and its alias
    reach one key (two of them in one layer: an error of the resolution)."""
    layers = [(Layer.DEFAULTS, ctx.base_knobs), (Layer.METHOD, ctx.recipe_defaults)] + [
        (layer, knobs) for layer, knobs in ctx.knob_layers if layer is not Layer.DEFAULTS]
    for layer, knobs in layers:
        for name, raw in knobs.items():
            if name not in KNOBS:
                close = close_knobs(name)
                ctx.error(f"knobs.{name}", "unknown knob; "
                                           f"{('did you mean ' + ', '.join(close) + '? ') if close else ''}"
                          "see `sf schema` for the knobs, or pass a raw Hydra key with --set a.b.c=VALUE")
                continue
            key = knob_key(name, ctx.sft)
            if key is None:
                ctx.error(f"knobs.{name}", f"this knob does not apply to verl/{ctx.method.name}"
                          + ("; SFT knobs: " + ", ".join(k for k, kn in KNOBS.items() if kn.sft_key)
                             if ctx.sft else ""))
                continue
            if layer is Layer.CONFIG and _read_from_config_file(ctx, name) and _quoted_number(name, raw):
                ctx.error(f"knobs.{name}", f"{raw!r} is quoted, so YAML reads text, not a number; write it without "
                                           f"quotes: {name}: {raw.strip()}")
                continue
            try:
                value = coerce_knob(name, raw)
            except SpecError as exc:
                ctx.errors.append(exc)
                continue
            if name == "policy_loss_mode" and value is not None:
                value = POLICY_LOSS_MODES[value]  # gmpo -> geo_mean, clip-cov -> clip_cov, ...
            if layer in (Layer.DEFAULTS, Layer.METHOD):  # configs/defaults.yaml, then the recipe's defaults
                ctx.set(key, value, layer, field=f"method default {name}")
            elif value is None:  # null: verl's own default, whatever a lower layer set
                ctx.set(key, None, layer, prefix="default", field=f"knobs.{name}", knob=True)
            else:
                ctx.set(key, value, layer, field=f"knobs.{name}", knob=True)


def _read_from_config_file(ctx, name: str) -> bool:
    """Whether knob `name`'s value is config.yaml's, read from the file (sf's loader types its numbers)."""
    origin = ctx.spec.origins.get(f"knobs.{name}")
    return origin is not None and origin.layer is Layer.CONFIG and origin.path is not None


def _quoted_number(name: str, raw) -> bool:
    """A number knob's config.yaml value that YAML read as text although it spells a number:
    it was quoted in the file ("1e-6"; unquoted, sf's loader reads 1e-6 as a number:
    launcher.spec.experiment.ConfigLoader)."""
    if KNOBS[name].type not in ("int", "float") or not isinstance(raw, str) or "_" in raw:
        return False
    return isinstance(parse_scalar(raw), (int, float))


def rule_raw_overrides(ctx) -> None:
    """Raw Hydra overrides of config.yaml, --set and the sweep point, each in its layer; legacy
    keys rewritten to the reward.* key verl 0.9.1 reads; a dict value written as its leaves
    (Hydra merges it into the node), so each reaches the key it really sets."""
    for source, prefix, key, value, layer in ctx.raw:
        if is_legacy(key):
            new = legacy_rewrite(key)
            if new is None:
                ctx.error(source, f"{key} is a legacy top-level reward key that verl 0.9.1's main_ppo ignores and has "
                          "no reward.* equivalent; use reward.* keys or knobs (see `sf schema`), "
                          "e.g. overlong_buffer_len")
                continue
            plus = "+" if new.startswith("reward.reward_kwargs.") else ""
            ctx.warn(f"{source}: legacy {prefix}{key} is ignored by verl 0.9.1's main_ppo; sf passes it as {plus}{new}")
            key, prefix = new, plus or prefix.replace("+", "")
        if key.startswith("reward.reward_kwargs.") and "+" not in prefix:
            prefix = "+"  # reward_kwargs is not in verl's schema: it must be added
        if prefix == "~":
            ctx.set(key, None, layer, prefix="~", raw_value=value, field=source)
            continue
        parsed = parse_value(value)
        if isinstance(parsed, dict) and parsed:
            item = ctx.next_item()
            for leaf, leaf_value in flatten(key, parsed):
                ctx.set(leaf, leaf_value, layer, prefix=prefix, field=source, item=item)
            continue
        ctx.set(key, value, layer, prefix=prefix, raw_value=value, field=source)


def rule_runtime_defaults(ctx) -> None:
    """The runtime's default overrides for this verl config (its registry entry's `overrides:`):
    what the image needs (no flash-attn: sdpa, no remove-padding), in the runtime layer: above
    the method's defaults, below the site, config.yaml, --set and the sweep point."""
    name = ctx.method.config_name
    table = ctx.runtime_overrides
    known = catalog.config_names(ctx.method.version)
    for other in table:
        if other not in known:  # a misspelt name's overrides would be dropped without a word
            close = difflib.get_close_matches(str(other), known, n=1, cutoff=0.6)
            ctx.error("runtime.overrides", f"the runtime registry's overrides name {other!r}, which is no verl config "
                      f"of verl {ctx.method.version} ({', '.join(known)}): its overrides would never be used; "
                      + (f"did you mean {close[0]}? " if close else "") + "fix the runtime registry")
    # an experimental trainer's config starts from ppo_trainer: the image's needs are the same
    # (the H200's one-step-off run took flash-attention without them), unless the runtime
    # names that config itself
    lines = table[name] if name in table else table.get(verlcheck.DERIVED_FROM.get(name, ""), ())
    for text in lines:
        prefix, key, value = split_override(text)
        ctx.set(key, value, Layer.RUNTIME, prefix=prefix, raw_value=value, field="runtime")


def rule_rollout_defaults(ctx) -> None:
    """What verl needs that compose does not catch: rollout.name (???) and micro batch sizes."""
    if ctx.sft:
        return
    if ctx.get("actor_rollout_ref.rollout.name") is None:
        ctx.set("actor_rollout_ref.rollout.name", "vllm", Layer.SF)


def rule_custom_reward_function(ctx) -> None:
    """reward.function {path, name} -> reward.custom_reward_function.{path,name}."""
    fn = (ctx.values.get("reward") or {}).get("function") or {}
    if fn.get("path"):
        origin = ctx.origin_of("reward.function.path")
        ctx.set("reward.custom_reward_function.path", fn["path"], Layer.BINDING, origin=origin)
        ctx.set("reward.custom_reward_function.name", fn.get("name") or "compute_score", Layer.BINDING, origin=origin)
    elif fn.get("name"):
        ctx.error("reward.function.path", "a reward function name without a path; set reward.function.path: "
                                          "my_reward.py")


def rule_raw_reward_function_file(ctx) -> None:
    """A raw override of verl's reward function file gets the check reward.function gets:
    verl imports it at start-up (read here with ast, never imported)."""
    key = "reward.custom_reward_function.path"
    path = ctx.get(key)
    if ctx.sft or not ctx.user_sets(key) or not isinstance(path, str) or not path:
        return
    if not os.path.isabs(path):
        ctx.error(ctx.culprit(key), f"{path!r} is relative to wherever verl starts; give an absolute path, "
                  "or use reward.function.path (relative to the experiment folder)")
        return
    problem = check_reward_function(path, ctx.get("reward.custom_reward_function.name") or "compute_score",
                                    field_name=ctx.culprit(key))
    if problem:
        ctx.error(ctx.culprit(key) if problem.field != "reward.function.name" else
                  ctx.culprit("reward.custom_reward_function.name", ctx.culprit(key)), problem.message)


def rule_entry(ctx) -> None:
    """An experiment's main.py, if present, becomes the entry (verl-recipe style)."""
    if ctx.main_py:
        if ctx.sft:
            ctx.entry = ("torchrun", ctx.main_py)
        else:
            ctx.entry = ("python3", ctx.main_py)
    else:
        ctx.entry = tuple(ctx.method.entry)
