"""What the RL algorithm needs of its values: rollout n per method, DAPO's overlong buffer and
group filtering, rollout correction, the policy loss's parameters."""

from __future__ import annotations

from typing import Any, Callable

from launcher.compile import resolve
from launcher.compile.knobs import ACTOR, CORRECTION, parse_rs_threshold, parse_threshold
from launcher.compile.values import is_number
from launcher.errors import SpecError
from launcher.spec.layers import Layer


def rule_rollout_n(ctx) -> None:
    """grpo, rloo, reinforce-baseline and dapo need rollout n >= 2; remax needs n = 1."""
    if ctx.sft:
        return
    n = ctx.get("actor_rollout_ref.rollout.n", 1)
    if not is_number(n):
        return  # a string or null: reported by launcher.compile.typed (a float is judged as a number too)
    lo, hi = ctx.method.rollout_n_min, ctx.method.rollout_n_max
    src = ctx.culprit("actor_rollout_ref.rollout.n", "knobs.rollout_n")
    if lo is not None and n < lo:
        ctx.error(src, f"verl/{ctx.method.name} compares responses within a group: rollout_n must be >= {lo} "
                  f"(got {n}); set rollout_n: {max(lo, 5)}")
    if hi is not None and n > hi:
        ctx.error(src, f"verl/{ctx.method.name} uses the greedy response as baseline: rollout_n must be {hi} "
                  f"(got {n}); set rollout_n: 1 or use verl/grpo")


def rule_dapo(ctx) -> None:
    """DAPO: overlong buffer reads max_resp_len from data.max_response_length (passed along)."""
    if ctx.get("reward.reward_kwargs.overlong_buffer_cfg.enable") is not True:
        return
    resp = ctx.get("data.max_response_length")
    if ctx.get("reward.reward_kwargs.overlong_buffer_cfg.log") is None \
            and not ctx.user_sets("reward.reward_kwargs.overlong_buffer_cfg.log"):
        ctx.set("reward.reward_kwargs.overlong_buffer_cfg.log", False, Layer.SF, prefix="+")
    if isinstance(resp, int) and not isinstance(resp, bool) and not ctx.user_sets("reward.reward_kwargs.max_resp_len"):
        ctx.set("reward.reward_kwargs.max_resp_len", resp, Layer.SF, prefix="+")


def rule_filter_metric(ctx) -> None:
    """Group filtering on (DAPO) needs the metric it filters by: verl 0.9.1's trainer_base raises
    at start when algorithm.filter_groups.metric is empty or null (`filter_metric: ""`)."""
    if ctx.get("algorithm.filter_groups.enable") is not True:
        return
    key = "algorithm.filter_groups.metric"
    entry = ctx.resolution.entries.get(key)
    if entry is not None and entry.write.op == resolve.DEFAULT and entry.write.layer in resolve.INPUT_LAYERS:
        ctx.warn(f"{entry.write.field}: null means verl's default metric, {ctx.get(key)}; "
                 "name the metric DAPO filters by (acc, score, seq_reward, reward) to say it")
    metric = ctx.get("algorithm.filter_groups.metric")
    if metric is None or not str(metric).strip():
        ctx.error(ctx.culprit("algorithm.filter_groups.metric", "knobs.filter_metric"),
                  f"algorithm.filter_groups.metric={metric!r}: group filtering is on and verl raises at start "
                  "without the metric it filters by; set filter_metric: acc (or score, seq_reward, reward), "
                  "or filter_groups: false")


def rule_overlong_buffer(ctx) -> None:
    """DAPO's overlong buffer must fit: verl asserts max_resp_len >= len > 0."""
    if ctx.get("reward.reward_kwargs.overlong_buffer_cfg.enable") is not True:
        return
    resp = ctx.get("reward.reward_kwargs.max_resp_len", ctx.get("data.max_response_length"))
    length = ctx.get("reward.reward_kwargs.overlong_buffer_cfg.len", 0)
    culprit = ctx.culprit_write("reward.reward_kwargs.overlong_buffer_cfg.len")
    src = culprit.field if culprit is not None else "knobs.overlong_buffer_len"
    if is_number(resp) and is_number(length) and length > resp:
        ctx.error(src, f"overlong buffer ({length} tokens) is longer than max_response_length ({resp}); verl asserts "
                  f"max_resp_len >= len: raise max_response_length or lower overlong_buffer_len")
    if not (is_number(length) and length > 0):
        raw = culprit is not None and not culprit.knob and culprit.layer in (Layer.CONFIG, Layer.SET)
        ctx.error(src if raw else "knobs.overlong_buffer_len",
                  "the overlong buffer is on but its length is not > 0; set overlong_buffer_len: 4096")


def rule_dynamic_sampling_reward_model(ctx) -> None:
    """filter_groups with a reward model colocated on the training GPUs: verl asserts; refused."""
    if ctx.get("algorithm.filter_groups.enable") is True and ctx.get("reward.reward_model.enable") is True \
            and ctx.get("reward.reward_model.enable_resource_pool") is not True:
        ctx.error("reward.model", "dynamic sampling (filter_groups) needs rewards at rollout time, but the reward "
                  "model shares the training GPUs (verl asserts): use a rule-based reward function, or give the "
                  "reward model its own pool (spec.resources.pools + roles: {reward: <pool>})")


def rule_rollout_correction(ctx) -> None:
    """Rollout correction (rollout_is) spells out calculate_log_probs=True in the command."""
    if ctx.sft:
        return
    if ctx.get(CORRECTION + "rollout_is") not in (None, "null"):  # from any input: a knob, a raw override, a dict
        # verl 0.9.1 defaults it to true; make it explicit so the compiled command says so (sf's
        # layer: any input that sets it wins).
        ctx.set("actor_rollout_ref.rollout.calculate_log_probs", True, Layer.SF)


def rule_rollout_correction_inputs(ctx) -> None:
    """Rollout correction needs rollout-side log probs, and an importance-sampling threshold
    verl 0.9.1 can parse: rollout_is_threshold a number > 0 (TIS) or 'LOW_HIGH' (IcePop,
    0 < LOW < HIGH)."""
    if ctx.sft:
        return
    rc = "algorithm.rollout_correction."
    is_mode = ctx.get(rc + "rollout_is")
    rs_modes = ctx.get(rc + "rollout_rs")
    is_on, rs_on = is_mode not in (None, "null"), rs_modes not in (None, "null")
    if (is_on or rs_on) and ctx.get("actor_rollout_ref.rollout.calculate_log_probs", True) is False:
        ctx.error(ctx.culprit("actor_rollout_ref.rollout.calculate_log_probs", "knobs.rollout_calculate_log_probs"),
                  "rollout correction (rollout_is/rollout_rs) compares against the rollout's own log probs, which "
                  "calculate_log_probs=false turns off; set rollout_calculate_log_probs: true or drop "
                  "rollout_is/rollout_rs")
    user = {key for _source, key in ctx.user_keys()}
    for threshold, switch, on, example in (("rollout_is_threshold", "rollout_is", is_on, "token"),
                                           ("rollout_rs_threshold", "rollout_rs", rs_on, "token_k1")):
        if rc + threshold in user and not on:  # verl reads the threshold only with its switch on
            ctx.warn(f"{ctx.culprit(rc + threshold, 'knobs.' + threshold)}: {threshold} is set but {switch} is not, "
                     f"so verl ignores it; set {switch} (e.g. {switch}: {example}) or drop {threshold}")
    if is_on:
        src = ctx.culprit(rc + "rollout_is_threshold", "knobs.rollout_is_threshold")
        try:
            parse_threshold(ctx.get(rc + "rollout_is_threshold", 2.0), src)
        except SpecError as exc:
            ctx.errors.append(exc)


def rule_rollout_rs_threshold(ctx) -> None:
    """Rejection sampling (rollout_rs) needs rollout_rs_threshold: one entry or one per
    rollout_rs option, LOW_HIGH for k1 modes only."""
    rc = "algorithm.rollout_correction."
    rs_modes = ctx.get(rc + "rollout_rs")
    if ctx.sft or rs_modes in (None, "null"):
        return
    threshold = ctx.get(rc + "rollout_rs_threshold")
    src = ctx.culprit(rc + "rollout_rs_threshold", "knobs.rollout_rs_threshold")
    if threshold in (None, "null"):
        ctx.error(src, "rollout_rs needs rollout_rs_threshold (verl raises without it); "
                  "e.g. rollout_rs_threshold: 0.01, or 0.5_2.0 for k1 modes")
        return
    try:
        parse_rs_threshold(threshold, src)
    except SpecError as exc:
        ctx.errors.append(exc)
        return
    modes = [m.strip() for m in str(rs_modes).split(",") if m.strip()]
    parts = [p.strip() for p in str(threshold).split(",")]
    if len(parts) not in (1, len(modes)):
        ctx.error(src, f"{len(parts)} thresholds for {len(modes)} rollout_rs options ({', '.join(modes)}); "
                  "give one shared threshold or one per option")
        return
    for mode, part in zip(modes, parts * len(modes) if len(parts) == 1 else parts, strict=True):
        if "_" in part and not mode.endswith("k1"):
            ctx.error(src, f"{mode} takes one upper bound, not LOW_HIGH {part!r} (only *_k1 modes take a pair); "
                      "e.g. rollout_rs_threshold: 0.01")


# loss mode -> (key, test, what verl does otherwise), read from verl 0.9.1's @register_policy_loss functions.
POLICY_LOSS_NEEDS: dict[str, tuple[tuple[str, Callable[[Any], bool], str], ...]] = {
    "dro": ((ACTOR + "policy_loss.dro_beta", lambda v: is_number(v) and v > 0,
             "compute_policy_loss_dro raises unless policy_loss.dro_beta > 0; set dro_beta: 0.1"),),
    "vanilla": ((ACTOR + "clip_ratio_c", lambda v: v is None or (is_number(v) and v > 1.0),
                 "compute_policy_loss_vanilla asserts clip_ratio_c > 1.0 (dual-clip); set clip_ratio_c: 3.0"),),
    "clip_cov": ((ACTOR + "policy_loss.clip_cov_ratio", lambda v: v is None or (is_number(v) and v > 0),
                  "compute_policy_loss_clip_cov asserts clip_cov_ratio > 0"),),
    "kl_cov": ((ACTOR + "policy_loss.kl_cov_ratio", lambda v: v is None or (is_number(v) and v > 0),
                "compute_policy_loss_kl_cov asserts kl_cov_ratio > 0"),),
}


def rule_policy_loss_params(ctx) -> None:
    """A policy loss mode gets the parameters its verl 0.9.1 loss function requires."""
    if ctx.sft:
        return
    mode = ctx.get(ACTOR + "policy_loss.loss_mode", "vanilla")
    for key, ok, why in POLICY_LOSS_NEEDS.get(str(mode), ()):
        value = ctx.get(key)
        if not ok(value):
            ctx.error(ctx.culprit(key, ctx.culprit(ACTOR + "policy_loss.loss_mode", "knobs.policy_loss_mode")),
                      f"policy_loss_mode {mode} with {key}={value!r}: {why}")
