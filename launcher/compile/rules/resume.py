"""Checkpoints for requeue and export: where verl saves, and that a requeued job resumes."""

from __future__ import annotations

from launcher.compile.values import is_int
from launcher.spec.layers import Layer, Origin


def rule_checkpoints(ctx) -> None:
    """Checkpoints for requeue and export: absolute dir in the run dir, resume_mode=auto."""
    ctx.set("trainer.default_local_dir", ctx.checkpoint_dir, Layer.RUN)
    ctx.set("trainer.resume_mode", "auto", Layer.SF, origin=Origin(Layer.RUN))  # a user layer may turn it off (warned)


ASYNC_SAVE_KEY = "actor_rollout_ref.actor.checkpoint.async_save"
CRITIC_ASYNC_SAVE_KEY = "critic.checkpoint.async_save"


def rule_checkpoints_resume(ctx) -> None:
    """A requeued job resumes: save_freq > 0, resume_mode=auto, and no asynchronous save with
    auto resume (verl 0.9.1's trainer_base._save_checkpoint skips latest_checkpointed_iteration.txt
    when actor.checkpoint.async_save is true, so auto resume finds nothing and the run restarts
    from step 0 without a word: verl issue 7952)."""
    save = ctx.get("trainer.save_freq")
    if is_int(save) and save <= 0:
        ctx.warn(f"save_freq={save}: verl saves no checkpoint, so a requeued or preempted job restarts from step 0; "
                 "set save_freq: 10")
    mode = ctx.get("trainer.resume_mode")
    if mode is None and ctx.user_sets("trainer.resume_mode"):
        ctx.error(ctx.culprit("trainer.resume_mode"),
                  "trainer.resume_mode is null or deleted: sf resumes requeued jobs with resume_mode=auto; remove the "
                  "override, or turn resuming off explicitly with resume_mode: disable")
        return
    if mode not in (None, "auto"):
        ctx.warn(f"resume_mode={mode}: a requeued job will not resume from its last checkpoint (sf expects auto)")
    if not ctx.sft and ctx.get(ASYNC_SAVE_KEY) is True and mode in (None, "auto"):
        ctx.error(ctx.culprit(ASYNC_SAVE_KEY),
                  f"{ASYNC_SAVE_KEY}=true with resume_mode=auto: verl 0.9.1 then never writes "
                  "latest_checkpointed_iteration.txt, so a requeued job restarts from step 0 (verl issue 7952); "
                  f"remove {ASYNC_SAVE_KEY}")
    # the critic's own flag does not stop the tracker file: it names a step whose critic
    # checkpoint may still be being written when the requeue comes
    if not ctx.sft and ctx.get(CRITIC_ASYNC_SAVE_KEY) is True and mode in (None, "auto"):
        ctx.warn(f"{CRITIC_ASYNC_SAVE_KEY}=true with resume_mode=auto: verl 0.9.1 writes "
                 "latest_checkpointed_iteration.txt while the critic's save may still run, so a job requeued "
                 f"right after a save can resume from an incomplete critic checkpoint; remove {CRITIC_ASYNC_SAVE_KEY}")
