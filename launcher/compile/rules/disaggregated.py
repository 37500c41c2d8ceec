"""Disaggregated RL: verl/grpo-one-step-off and verl/grpo-async, whose rollout runs on a pool of
its own (docs/disaggregated.md)."""

from __future__ import annotations

import math

from launcher.compile import catalog
from launcher.compile.knobs import ACTOR
from launcher.compile.values import hydra_value, is_int, is_number
from launcher.spec.layers import Layer

# verl/grpo-one-step-off and verl/grpo-async (catalog: rollout_pool: separate) run verl 0.9.1's
# experimental trainers, whose rollout servers get a pool of their own: the actor, ref and
# critic in `trainer_pool` sized by trainer.* (experimental/separation/utils.py:37-47), the
# rollout in one `rollout_pool_<replica>` per server (workers/rollout/replica.py:190-205),
# sized by the TOP-LEVEL rollout.nnodes / rollout.n_gpus_per_node, which both mains copy over
# actor_rollout_ref.rollout.* before anything reads it (one_step_off_policy/main_ppo.py:121-122,
# fully_async_policy/fully_async_main.py:235-236).

ROLLOUT_POOL_SIZE = {  # what the rollout pool fills -> every key verl takes it from
    "nodes": ("rollout.nnodes", "actor_rollout_ref.rollout.nnodes"),
    "gpus_per_node": ("rollout.n_gpus_per_node", "actor_rollout_ref.rollout.n_gpus_per_node"),
}


def _rollout_pool(ctx):
    """The pool roles.rollout names, when it is a pool of its own (else None)."""
    by_name = {p.name: p for p in ctx.pools}
    pool = by_name.get(ctx.roles.get("rollout"))
    actor = by_name.get(ctx.roles.get("actor")) or (ctx.pools[0] if ctx.pools else None)
    return pool if pool is not None and pool is not actor else None


def rule_rollout_not_colocated(ctx, train) -> None:
    """These trainers refuse a rollout on the actor's GPUs: they assert hybrid_engine is off
    (one_step_off_policy/ray_trainer.py:87-88, fully_async_trainer.py:75-76) and start their
    rollout servers in a resource pool of their own, which Slurm must allocate as its own het
    group; on the actor's pool they would ask Ray for GPUs the job never got."""
    if len(ctx.pools) < 2:
        return  # rule_separate_rollout_pool says what to declare
    pool_name = ctx.roles.get("rollout")
    if pool_name is None or pool_name == train.name:
        ctx.error("spec.resources.roles.rollout",
                  f"verl/{ctx.method.name} runs the rollout on a pool of its own (verl 0.9.1's "
                  f"{ctx.method.entry_module} refuses a colocated rollout); map rollout to the second pool, e.g. "
                  f"roles: {{actor: {train.name}, rollout: {ctx.pools[1].name}}}, or use verl/grpo for a colocated "
                  "rollout")


def rule_separate_rollout_pool(ctx) -> None:
    """The rollout pool -> rollout.nnodes / rollout.n_gpus_per_node (the keys these mains read);
    the train pool filled trainer.* already (rule_pools). One pool only is refused: the
    trainers need a rollout pool of their own."""
    if ctx.sft or not ctx.method.separate_rollout or not ctx.pools:
        return
    if len(ctx.pools) < 2:
        ctx.error("spec.resources.pools",
                  f"verl/{ctx.method.name} runs the rollout on a pool of its own: declare two pools, e.g. "
                  "pools: [{name: train, nodes: 1}, {name: gen, nodes: 1}] and roles: {actor: train, rollout: gen} "
                  "(`sf new NAME --method verl/" + ctx.method.name + "` writes them)")
        return
    pool = _rollout_pool(ctx)
    if pool is None:
        return  # rule_rollout_not_colocated names roles.rollout
    ctx.set("rollout.nnodes", pool.nodes, Layer.TOPOLOGY)
    ctx.set("rollout.n_gpus_per_node", pool.gpus_per_node, Layer.TOPOLOGY)


def rule_separate_rollout_sizes(ctx) -> None:
    """A raw rollout pool size that disagrees with the pools is refused, naming the key: the
    top-level rollout.* would size a pool Slurm never allocated, and a raw
    actor_rollout_ref.rollout.nnodes / n_gpus_per_node is overwritten by the main from rollout.*."""
    if ctx.sft or not ctx.method.separate_rollout:
        return
    pool = _rollout_pool(ctx)
    if pool is None:
        return
    for field, keys in ROLLOUT_POOL_SIZE.items():
        want = getattr(pool, field)
        for key in keys:
            for source, ukey, value in ctx.user_values():
                if ukey == key and value != want:
                    ctx.error(source, f"{key}={hydra_value(value)} disagrees with pool {pool.name!r} "
                              f"({pool.nodes} node(s) x {pool.gpus_per_node} GPUs), where roles.rollout puts verl's "
                              f"rollout: sf fills rollout.nnodes / rollout.n_gpus_per_node from that pool; remove "
                              f"{key} and set spec.resources.pools[{pool.het_group}].{field} instead")


def rule_separate_rollout_replicas(ctx) -> None:
    """The rollout pool holds whole rollout servers: verl 0.9.1 starts (rollout GPUs) //
    (tensor x data x pipeline parallel) servers (workers/rollout/llm_server.py:441-460), each
    on min(gpus_per_node, its size) GPUs per node, a size that must divide by that
    (replica.py:108-116); what is left over idles, and no server at all fails the run."""
    if ctx.sft or not ctx.method.separate_rollout:
        return
    pool = _rollout_pool(ctx)
    if pool is None:
        return
    r = "actor_rollout_ref.rollout."
    sizes = [ctx.get(r + "tensor_model_parallel_size", 2), ctx.get(r + "data_parallel_size", 1),
             ctx.get(r + "pipeline_model_parallel_size", 1)]
    if not all(is_int(v) and v > 0 for v in sizes):
        return  # rule_value_types reports a bad type
    server = sizes[0] * sizes[1] * sizes[2]
    gpus = pool.nodes * pool.gpus_per_node
    src = ctx.culprit(r + "tensor_model_parallel_size", "knobs.tensor_model_parallel_size")
    if gpus % server:
        none = " (no server: the run fails)" if gpus < server else ""
        ctx.error(src, f"a rollout server takes {server} GPUs (tensor x data x pipeline parallel = "
                  f"{' x '.join(map(str, sizes))}) but pool {pool.name!r} has {gpus}: verl 0.9.1 starts "
                  f"{gpus // server} server(s) and leaves {gpus % server} GPUs idle{none}; "
                  f"pick a tensor_model_parallel_size that divides {gpus}, or resize the pool")
    elif server > pool.gpus_per_node and server % pool.gpus_per_node:
        ctx.error(src, f"a rollout server of {server} GPUs spans nodes of {pool.gpus_per_node} GPUs unevenly "
                  f"(verl 0.9.1's replica.py asserts its size divides by the GPUs per node); pick a "
                  f"tensor_model_parallel_size that is a multiple of {pool.gpus_per_node} or divides it")


# The keys verl 0.9.1's disaggregated trainers' own Hydra configs add on top of ppo_trainer
# (experimental/one_step_off_policy/config/one_step_off_ppo_trainer.yaml,
# experimental/fully_async_policy/config/fully_async_ppo_trainer.yaml; a key or a subtree):
# tests/unit/test_bad_inputs_33.py holds this table to verl's YAML.
TRAINER_OWN_KEYS = {
    "one_step_off_ppo_trainer": ("rollout.nnodes", "rollout.n_gpus_per_node"),
    "fully_async_ppo_trainer": ("async_training", "rollout.nnodes", "rollout.n_gpus_per_node", "rollout.n",
                                "rollout.total_rollout_steps", "actor_rollout_ref.actor.use_rollout_log_probs",
                                "actor_rollout_ref.rollout.standalone_gpu_memory_utilization"),
}


def rule_other_trainers_keys(ctx) -> None:
    """A key only another trainer's config has (async_training.*, rollout.total_rollout_steps,
    ...): written plainly Hydra refuses it (not a key), written with `+` verl composes it and
    never reads it. Either way the fix is the method that reads it."""
    mine = ctx.method.config_name
    for source, key in ctx.user_keys():
        owners = [config for config, keys in TRAINER_OWN_KEYS.items()
                  if any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in keys)]
        if not owners or mine in owners:
            continue
        readers = [f"verl/{m}" for m in catalog.methods(ctx.method.version)
                   if catalog.get_method(ctx.method.version, m).config_name in owners]
        use = f", or use method: {' or '.join(readers)}" if readers else ""
        ctx.error(source, f"{key} is read only by {' and '.join(readers) or 'another trainer'} (verl 0.9.1's "
                  f"{' and '.join(owners)} config); verl/{ctx.method.name} never reads it: remove it{use}")


ASYNC = "async_training."
FULLY_ASYNC = "fully-async"  # the recipe's trainer family (catalog.TRAINERS) these rules are for


# The fully async trainer's own numbers: key -> (least value, what verl needs, an example).
# staleness_threshold >= 0 and trigger_parameter_sync_step >= 1 are asserted
# (fully_async_rollouter.py:353-356); an infinite staleness_threshold overflows int() when the
# rollouter sizes its queue (fully_async_rollouter.py:493-497); require_batches: the trainer
# takes ppo_mini_batch_size x require_batches samples a step (fully_async_trainer.py:158-159);
# concurrent_samples_per_replica 0 (or less) makes the rollouter wait for a free slot forever
# (`while len(active_tasks) >= max_concurrent_samples`, fully_async_rollouter.py:970).
ASYNC_NUMBERS = {
    "staleness_threshold": (0, "a number >= 0, not inf (0: no sample older than the weights of the last sync; "
                            "0.5: up to half a sync's samples more)", 0.5),
    "trigger_parameter_sync_step": (1, "a whole number >= 1 (trainer steps between two weight pushes to the "
                                    "rollouter)", 1),
    "require_batches": (1, "a whole number >= 1 (ppo mini batches a trainer step takes)", 1),
    "concurrent_samples_per_replica": (1, "a whole number >= 1 (generation requests each rollout server takes at "
                                       "once; with 0 the rollouter waits for a free slot forever)", 16),
}


def rule_async_numbers(ctx) -> None:
    """The fully async trainer's own numbers (ASYNC_NUMBERS), as verl asserts them."""
    if ctx.sft or ctx.method.trainer != FULLY_ASYNC:
        return
    for key, (low, kind, example) in ASYNC_NUMBERS.items():
        value = ctx.get(ASYNC + key)
        whole = kind.startswith("a whole")
        if not (is_int(value) if whole else is_number(value)):
            continue  # None (verl's default), or a type rule_value_types names
        if not (math.isfinite(value) and value >= low):
            ctx.error(ctx.culprit(ASYNC + key), f"{ASYNC}{key}={hydra_value(value)}: verl 0.9.1's fully async "
                      f"trainer needs {kind}; e.g. {ASYNC}{key}={example}")


def rule_async_training(ctx) -> None:
    """The fully async trainer's (verl/grpo-async) own checks, before anything queues, beside
    its numbers (rule_async_numbers): a reward model needs its own pool (asserted,
    fully_async_rollouter.py:361-365: the rollouter never pauses); test_freq 0 divides by
    zero at the end (fully_async_trainer.py:529). The run's length is
    rollout.total_rollout_steps prompts (verl's default 100), not trainer.total_training_steps
    (fully_async_rollouter.py:405-407, :493-500): rule_async_run_length."""
    if ctx.sft or ctx.method.trainer != FULLY_ASYNC:
        return
    rm = "reward.reward_model."
    if ctx.get(rm + "enable") is True and ctx.get(rm + "enable_resource_pool") is not True:
        ctx.error("reward.model", f"verl/{ctx.method.name} needs the reward model on a pool of its own (verl 0.9.1's "
                  "rollouter asserts it: it never pauses to free GPUs); add a pool and roles: {reward: <pool>}, or "
                  "use a rule-based reward function")
    for source, key, _value in ctx.user_values():
        if key == "rollout.n":  # fully_async_ppo_trainer.yaml:60-61 has it; no code reads it
            ctx.error(source, "rollout.n is not read by verl 0.9.1's fully async trainer (responses per prompt are "
                      "actor_rollout_ref.rollout.n); remove it and set the knob rollout_n")
    if ctx.get("trainer.test_freq") == 0:
        ctx.error(ctx.culprit("trainer.test_freq", "knobs.test_freq"), "test_freq=0: verl 0.9.1's fully async "
                  "trainer divides by it at the end of the run; set test_freq: -1 (no validation) or a step count")
    user = {key for _source, key in ctx.user_keys()}  # raw overrides and knobs, as verl keys
    if "trainer.total_training_steps" in user:
        ctx.warn("trainer.total_training_steps is not read by verl 0.9.1's fully async trainer: the run ends "
                 "after rollout.total_rollout_steps prompts (and total_epochs); set rollout.total_rollout_steps")
    elif not ctx.user_sets("rollout.total_rollout_steps") and is_int(ctx.get("rollout.total_rollout_steps")):
        default, step = ctx.get("rollout.total_rollout_steps"), _async_step_prompts(ctx)
        none = (f", fewer than the {step} a trainer step takes (ppo_mini_batch_size x require_batches): the run "
                "would end without a trainer step") if default < step else ""
        ctx.warn(f"verl/{ctx.method.name} ends after rollout.total_rollout_steps={default} prompts (verl 0.9.1's "
                 f"default){none}; set rollout.total_rollout_steps=N, or =null for total_epochs over the whole dataset")


def _async_step_prompts(ctx) -> int:
    """The prompts one fully async trainer step takes: ppo_mini_batch_size x require_batches
    (fully_async_trainer.py:159); 1 when either is no positive whole number (other rules say so)."""
    mini, batches = ctx.get(ACTOR + "ppo_mini_batch_size"), ctx.get(ASYNC + "require_batches", 1)
    return mini * batches if is_int(mini) and is_int(batches) and mini > 0 and batches > 0 else 1


def rule_async_run_length(ctx) -> None:
    """verl/grpo-async: rollout.total_rollout_steps is the number of prompts the rollouter
    feeds (fully_async_rollouter.py:405-407, :876-884; at least one, whatever the value), and
    a trainer step waits for ppo_mini_batch_size x require_batches of them
    (fully_async_trainer.py:159, :428-430): fewer, and the run ends without a trainer step
    (zero or a negative value included). null: every prompt of total_epochs."""
    if ctx.sft or ctx.method.trainer != FULLY_ASYNC:
        return
    key = "rollout.total_rollout_steps"
    value = ctx.get(key)
    if not is_int(value) or not ctx.user_sets(key):
        return  # None: every prompt; another type: rule_value_types names it; verl's default: rule_async_training warns
    step = _async_step_prompts(ctx)
    mini, batches = ctx.get(ACTOR + "ppo_mini_batch_size"), ctx.get(ASYNC + "require_batches", 1)
    if value < step:
        per_step = (f"a trainer step takes ppo_mini_batch_size x require_batches = {mini} x {batches} = {step} "
                    "prompts") if step > 1 else "a trainer step takes at least 1 prompt"
        ctx.error(ctx.culprit(key), f"{key}={hydra_value(value)}: verl 0.9.1's fully async rollouter feeds that many "
                  f"prompts and {per_step}, so the run would end without a trainer step; set {key} to at least "
                  f"{step} (e.g. {key}={max(step, 100)}), or {key}=null for every prompt of total_epochs")


# The CPUs verl 0.9.1's disaggregated trainers ask for beside their GPU bundles: actors placed
# anywhere in the cluster, each on one node. one-step-off: OneStepTaskRunner 10
# (one_step_off_policy/main_ppo.py:33). fully async: FullyAsyncTaskRunner 1, FullyAsyncTrainer
# 10, FullyAsyncRollouter 10, MessageQueue 2 (fully_async_main.py:35, fully_async_trainer.py:53,
# fully_async_rollouter.py:329, message_queue.py:26). Bundles: 3 CPUs a training GPU, 2 a
# standalone rollout GPU (ResourcePoolManager, replica.py:200-204).
DRIVER_ACTOR_CPUS = {"one_step_off_ppo_trainer": (10,), "fully_async_ppo_trainer": (1, 10, 10, 2)}


def rule_separate_cpus(ctx) -> None:
    """A warning when the pools' nodes (the site's cpus_per_node) cannot hold verl's bundles and
    these trainers' driver actors: Ray then waits for CPUs forever, without an error."""
    asks = DRIVER_ACTOR_CPUS.get(ctx.method.config_name)
    pool = _rollout_pool(ctx) if asks else None
    if pool is None:
        return
    free = []
    for p in ctx.pools:
        series = ctx.site.series.get(p.series)
        if series is None:
            return
        per_gpu = 2 if p is pool else 3
        free += [series.cpus_per_node - per_gpu * p.gpus_per_node] * p.nodes
    if sum(free) < sum(asks) or max(free, default=0) < max(asks):
        ctx.warn(f"verl/{ctx.method.name}'s driver actors ask {sum(asks)} CPUs ({' + '.join(map(str, asks))}, "
                 f"up to {max(asks)} on one node) beside verl's GPU bundles (3 CPUs a training GPU, 2 a rollout "
                 f"GPU), but the pools' nodes leave {sum(free)} free (at most {max(free, default=0)} on one node): "
                 "Ray would wait for CPUs forever; use nodes with more CPUs (the site's cpus_per_node) or more nodes")
