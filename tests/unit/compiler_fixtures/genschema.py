"""Regenerates configs/schema/config.schema.json from the knob table: python tests/unit/compiler_fixtures/genschema.py"""
import json
from launcher.compile.knobs import KNOBS
from launcher.compile.scheduler_options import SCHEMA_PROPERTIES as SCHEDULER_PROPERTIES


def build() -> dict:
    T = {"int": {"type": ["integer", "string", "null"]}, "float": {"type": ["number", "string", "null"]},
         "bool": {"type": ["boolean", "string", "null"]}, "str": {"type": ["string", "null"]},
         "list": {"type": ["array", "string"], "items": {"type": "string"}},
         "threshold": {"type": ["number", "string", "null"]}, "rs_threshold": {"type": ["number", "string", "null"]}, "rs_list": {"type": ["string", "array", "null"]}}
    knobs = {}
    for name, k in KNOBS.items():
        d = dict(T.get(k.type, {"type": ["string", "null"]}))
        if k.type == "enum":
            d = {"enum": list(k.choices) + [None]}
        desc = k.help or ""
        keys = " / ".join(x for x in (k.key and f"RL: {k.key}", k.sft_key and f"SFT: {k.sft_key}") if x)
        d["description"] = (desc + "; " if desc else "") + keys
        knobs[name] = d
    files = {"oneOf": [{"type": "string", "minLength": 1}, {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}]}
    schema = {
      "$schema": "https://json-schema.org/draft/2020-12/schema",
      "$id": "https://github.com/sf/configs/schema/config.schema.json",
      "title": "sf experiment config.yaml",
      "description": "An sf experiment: method, model, data, knobs, raw Hydra overrides, pools and Slurm settings. CLI flags (--model, --train-data, --set ...) override it.",
      "type": "object",
      "additionalProperties": False,
      "required": ["method"],
      "properties": {
        "method": {"type": "string", "pattern": "^verl/[a-z-]+$", "description": "verl/grpo, verl/dapo, verl/ppo, verl/rloo, verl/reinforce-baseline, verl/remax, verl/distillation, verl/sft, verl/grpo-one-step-off or verl/grpo-async"},
        "framework_version": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+(\\.[0-9]+)?$", "description": "verl version of the catalog: \"0.9.1\" or \"0.9.0\" (quote it)"},
        "description": {"type": "string"},
        "model": {"type": "string", "minLength": 1, "description": "model path or HF id (--model) -> actor_rollout_ref.model.path"},
        "teacher": {"type": "object", "additionalProperties": False, "properties": {"model": {"type": "string", "minLength": 1}}, "description": "verl/distillation: the teacher model"},
        "data": {"type": "object", "additionalProperties": False, "properties": {
            "train": {"type": "object", "additionalProperties": False, "properties": {
                "dataset": {"type": "string", "pattern": "^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+$", "description": "platform dataset OWNER/NAME@VERSION (--train-dataset)"},
                "files": dict(files, description="training files (--train-data) -> data.train_files; relative to the dataset when one is set")}},
            "validation": {"type": "object", "additionalProperties": False, "properties": {
                "files": dict(files, description="validation files (--validation-data) -> data.val_files")}}}},
        "reward": {"type": "object", "additionalProperties": False, "properties": {
            "function": {"type": "object", "additionalProperties": False, "properties": {
                "path": {"type": "string", "minLength": 1, "description": "python file, relative to the experiment dir -> reward.custom_reward_function.path"},
                "name": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "description": "function name (default compute_score)"}}},
            "model": {"type": "string", "minLength": 1, "description": "reward model path; on its own pool when roles.reward names one"}}},
        "custom_reward_function": {"type": "object", "additionalProperties": False, "description": "alias of reward.function (the product doc's name)", "properties": {
            "path": {"type": "string", "minLength": 1}, "name": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}}},
        "knobs": {"type": "object", "additionalProperties": False, "properties": knobs, "description": "named knobs; each maps to a verl Hydra key"},
        "overrides": {"type": "array", "items": {"type": "string", "pattern": "^[+~]{0,2}[A-Za-z_][A-Za-z0-9_.@/-]*(=[\\s\\S]*)?$"}, "description": "raw Hydra overrides, \"key=value\""},
        "spec": {"type": "object", "additionalProperties": False, "properties": {
            "resources": {"type": "object", "additionalProperties": False, "properties": {
                "pools": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "object", "additionalProperties": False, "required": ["name"], "properties": {
                    "name": {"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,15}$"},
                    "series": {"type": "string", "description": "GPU series of the site file (default: the site's default_series)"},
                    # at most 65536 nodes: Slurm is validated for clusters of up to 65,536 nodes
                    # (its large-cluster guide) and sbatch wraps a node count past 32 bits silently;
                    # 1e99 nodes reached the batch-size rule as a 100-digit GPU count
                    "nodes": {"type": "integer", "minimum": 1, "maximum": 65536,
                              "description": "nodes of the pool; at most 65536 (the largest cluster Slurm is "
                                             "validated for)"},
                    # at most 1024: no node holds that many GPUs (the largest hold 8 to 16); the site's
                    # series then says how many its nodes have
                    "gpus_per_node": {"type": "integer", "minimum": 1, "maximum": 1024,
                                      "description": "GPUs of each node the pool uses (default: the series'); at "
                                                     "most 1024"},
                    "spare_nodes": {"type": "integer", "minimum": 0, "maximum": 65536,
                                    "description": "nodes allocated beside `nodes` and kept out of training; a restart "
                                                   "in place (slurm.max_restarts_in_place) swaps one in for a node "
                                                   "that died; at most 65536 (as nodes)"}}}},
                "roles": {"type": "object", "additionalProperties": False, "properties": {
                    r: {"type": "string"} for r in ("actor", "rollout", "ref", "critic", "teacher", "reward")}}}}}},
        "slurm": {"type": "object", "additionalProperties": False, "properties": {
            "account": {"type": ["string", "null"]}, "qos": {"type": ["string", "null"]},
            "time": {"type": "string", "pattern": "^([0-9]+-)?[0-9]+(:[0-9]+){0,2}$|^(UNLIMITED|INFINITE)$",
                     "description": "wall time as Slurm reads it (launcher/compile/slurm_time.py checks the values): MINUTES, MINUTES:SECONDS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED"},
            "partition": {"type": ["string", "null"], "description": "overrides the series' partition for every pool"},
            "exclusive": {"type": "boolean"}, "requeue": {"type": "boolean"},
            # both at most 65535: Slurm counts a job's restarts in 16 bits, and sbatch refuses a
            # longer --signal lead (a bigger max_requeues wrapped in the script's bash arithmetic)
            "max_requeues": {"type": "integer", "minimum": 0, "maximum": 65535,
                             "description": "requeues after preemption or the wall time before the run gives up; "
                                            "at most 65535 (Slurm counts a job's restarts in 16 bits)"},
            "signal_lead_s": {"type": "integer", "minimum": 10, "maximum": 65535,
                              "description": "--signal=B:USR1@N: seconds before the limit when verl checkpoints; "
                                             "at most 65535 (sbatch refuses a longer lead)"},
            # the progress watchdog (launcher/injob/watchdog.py)
            "hang_timeout_s": {"type": "integer", "minimum": 0,
                               "description": "seconds without a new training step before the job counts as hung "
                                              "(stacks saved, requeued or failed); 5 x the median step time when "
                                              "longer; 0 turns the watchdog off"},
            "first_step_timeout_s": {"type": "integer", "minimum": 1,
                                     "description": "seconds from the driver's start to the first training step "
                                                    "before the job counts as hung"},
            "max_restarts_in_place": {"type": "integer", "minimum": 0,
                                      "description": "on a hang, a node's or the driver's death: stop Ray and the "
                                                     "driver and start both again in the same allocation (verl "
                                                     "resumes from its last checkpoint), at most this many times "
                                                     "per attempt, before the job is requeued or fails"},
            **SCHEDULER_PROPERTIES}},
      },
    }
    return schema


if __name__ == "__main__":
    json.dump(build(), open("configs/schema/config.schema.json", "w"), indent=2)
