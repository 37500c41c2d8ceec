"""`sf new`, `sf validate`, `sf schema`: writing and checking an experiment's config.yaml."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path

import click
import yaml

from launcher.cli.options import json_option, print_json, spec_flags, spec_options
from launcher.compile import catalog
from launcher.compile.catalog import all_methods, get_method, versions
from launcher.compile.resolve import shown_dict
from launcher.compile.values import hydra_value
from launcher.errors import SpecError
from launcher.slurm import login_env_variables, sbatch_input_variables
from launcher.spec import contracts
from launcher.spec.experiment import NAME_RE, leaves, schema_errors
from launcher.spec.experiment import schema as load_schema
from launcher.submit import pipeline
from launcher.submit.live import verify


def config_text(name: str, method: str, version: str) -> str:
    """The commented config.yaml `sf new` writes (valid against the schema)."""
    lines = [
        f"# sf experiment {name}: verl/{method} on verl {version}.",
        f"# Check it:  sf validate {name} --model PATH_OR_HF_ID --train-data FILE",
        f"# Run it:    sf submit {name} --profile SERIES:G --model ... --train-data ... --validation-data ...",
        "# Every key: `sf schema`. CLI flags override this file.",
        f"method: verl/{method}",
        f'framework_version: "{version}"',
        "",
        "# Model and data, here or at submit time (--model, --train-data, --validation-data):",
        "# model: Qwen/Qwen2.5-0.5B-Instruct",
        "# data:",
        "#   train: {files: data/train.parquet}        # or {dataset: OWNER/NAME@VERSION, files: train.parquet}",
        "#   validation: {files: data/test.parquet}",
    ]
    recipe = get_method(version, method)
    if recipe.teacher:
        lines += ["", "# The teacher runs on the second pool, on top of the training pool.",
                  "# teacher: {model: Qwen/Qwen2.5-7B-Instruct}"]
    if not recipe.sft:
        lines += ["", "# A custom reward function (optional; by default verl picks one by data_source):",
                  "# reward:", "#   function: {path: my_reward.py, name: compute_score}"]
    lines += ["", "# Knobs (each maps to a verl key; `sf schema` lists them):", "knobs:"]
    lines += ["  " + line for line in recipe.new.get("knobs", "").rstrip("\n").split("\n")]
    lines += ["", "# Raw Hydra overrides for anything without a knob, e.g. \"trainer.critic_warmup=0\":"]
    overrides = recipe.new.get("overrides") or []
    lines += ["overrides:", *(f"  - {o}" for o in overrides)] if overrides else ["overrides: []"]
    if recipe.separate_rollout:
        lines += ["", "# Rollout on a pool of its own (another series allowed): one heterogeneous job; sf fills",
                  "# trainer.* from the actor's pool and rollout.nnodes / n_gpus_per_node from the rollout's.",
                  "spec:", "  resources:", "    pools:",
                  "      - {name: train, nodes: 1}   # series/gpus_per_node default to the site's",
                  "      - {name: gen, nodes: 1}",
                  "    roles: {actor: train, rollout: gen}"]
    elif recipe.teacher:
        lines += ["", "spec:", "  resources:", "    pools:",
                  "      - {name: train, nodes: 1}   # series/gpus_per_node default to the site's",
                  "      - {name: teach, nodes: 1}",
                  "    roles: {actor: train, rollout: train, teacher: teach}"]
    else:
        lines += ["", "# Pools (default: one node of the site's default series; --profile reshapes the first):",
                  "# spec:", "#   resources:", "#     pools: [{name: train, series: h200, nodes: 1, gpus_per_node: 8}]"]
    lines += ["", "# Slurm settings (defaults from the site file):", '# slurm: {time: "04:00:00", partition: null}', ""]
    return "\n".join(lines)


def _complete_methods(ctx, param, incomplete):
    return [f"verl/{m}" for m in all_methods() if f"verl/{m}".startswith(incomplete)]


def _complete_versions(ctx, param, incomplete):
    return [v for v in versions() if v.startswith(incomplete)]


@click.command()
@click.argument("name")
@click.option("--method", "method", required=True, metavar="verl/METHOD", shell_complete=_complete_methods,
              help="one of the catalog's: " + ", ".join(f"verl/{m}" for m in all_methods()) + ".")
@click.option("--framework-version", "framework_version", default="0.9.1", show_default=True,
              shell_complete=_complete_versions, help="verl version of the catalog.")
@json_option
def new(name, method, framework_version, as_json):
    """Create experiments/NAME/config.yaml for a method."""
    if not NAME_RE.fullmatch(name):
        raise SpecError("NAME", f"{name!r} is not a valid experiment name: letters, digits, _ . - (at most 64), "
                        "starting with a letter or digit")
    m = catalog.parse_method(method)
    version = catalog.check_version(framework_version)
    catalog.get_method(version, m)
    exp = Path("experiments") / name
    target = exp / "config.yaml"
    if target.exists():
        raise SpecError(name, f"{target} already exists; edit it, or pick another name")
    text = config_text(name, m, version)
    problems = schema_errors(yaml.safe_load(text))
    assert not problems, problems
    exp.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".config.", suffix=".yaml", dir=exp)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        if target.exists():  # lost a race
            raise SpecError(name, f"{target} already exists; edit it, or pick another name")
        os.link(tmp, target)  # atomic, and never overwrites
    finally:
        os.unlink(tmp)
    next_step = f"sf validate {name} --model PATH_OR_HF_ID --train-data FILE"
    if catalog.get_method(version, m).teacher:  # no flag sets the teacher: config.yaml does
        next_step = f"set teacher: {{model: PATH_OR_HF_ID}} in {target}, then {next_step}"
    if as_json:
        print_json({"ok": True, "created": str(target), "method": method, "framework_version": version,
                    "next": next_step})
        return
    click.echo(f"created {target}")
    click.echo(f"next: {next_step}")


def _sbatch_env_warnings(site) -> list[str]:
    """One warning per SBATCH_* variable set here: sbatch reads them as options that
    override the script's #SBATCH lines."""
    out = [f"{name}={os.environ[name]} is set on this login node: sf leaves it out of the job's environment (it would "
           "carry another Python or verl than the runtime sf checked); the site's slurm.pass_login_env lets it through"
           for name in login_env_variables(passed=site.pass_sbatch_env)]
    for name in sbatch_input_variables():
        if name in site.pass_sbatch_env:
            out.append(f"{name}={os.environ[name]} is set and the site passes it to sbatch "
                       "(slurm.pass_sbatch_env): it overrides the script's #SBATCH lines")
        else:
            out.append(f"{name}={os.environ[name]} is set: sbatch would let it override the script's #SBATCH "
                       "lines; sf submit leaves it out of its sbatch call")
    return out


def pool_shape(pool) -> str:
    """A pool as validate's table shows it: "train 2x4 fake + 1 spare node" (the spares are
    allocated too: #SBATCH --nodes counts them)."""
    spares = f" + {pool.spare_nodes} spare node{'s' if pool.spare_nodes != 1 else ''}" if pool.spare_nodes else ""
    return f"{pool.name} {pool.nodes}x{pool.gpus_per_node} {pool.series}{spares}"


@click.command()
@click.argument("name")
@spec_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--live", is_flag=True,
              help="Also check against the live cluster, as submit does: the pools against what the partitions "
                   "can ever give; the account and QOS where the cluster enforces them.")
def validate(name, as_json, live, **kwargs):
    """Check an experiment and show the compiled verl command.

    Exit 0 when valid, 2 when not (one line per problem on stderr).
    """
    spec, plan, site = pipeline.check(name, spec_flags(kwargs))  # errors: launcher.cli.app prints them (as JSON too)
    if live:
        plan = replace(plan, warnings=(*plan.warnings, *verify(plan, site, spec.origins)))
    if as_json:
        out = {
            "ok": True,
            "valid": True,
            "experiment": plan.experiment,
            "method": f"verl/{plan.method}",
            "framework_version": plan.framework_version,
            "values": spec.values,
            "provenance": spec.provenance,
            "overrides": list(plan.overrides),
            "sources": list(plan.sources),
            "resolved": plan.resolved,
            "entry": list(plan.entry),
            "argv": plan.argv(),
            "pools": plan.to_dict()["pools"],
            "warnings": list(plan.warnings) + _sbatch_env_warnings(site),
            "sbatch_env": [{"name": name, "value": os.environ[name], "passed": name in site.pass_sbatch_env}
                           for name in sbatch_input_variables()],
        }
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"{plan.experiment}: verl/{plan.method} on verl {plan.framework_version} — valid")
    click.echo("values:")
    for dotted, value in leaves({k: v for k, v in spec.values.items() if k not in ("overrides", "knobs")}):
        click.echo(f"  {dotted} = {value!r}    [{spec.provenance.get(dotted, '?')}]")
    for key, item in plan.resolved.items():  # every verl key, as verl reads it (knobs, overrides, bindings)
        click.echo(f"  {key} = {shown_dict(item, hydra_value)}")
    click.echo("pools:")
    for p in plan.pools:
        click.echo(f"  het group {p.het_group}: {pool_shape(p)} roles={','.join(p.roles)}")
    click.echo("entry: " + " ".join(plan.entry))
    click.echo("overrides:")
    for ov, source in zip(plan.overrides, plan.sources, strict=True):
        click.echo(f"  {ov}    [{source}]")
    for w in [*plan.warnings, *_sbatch_env_warnings(site)]:
        click.echo(f"sf: warning: {w}", err=True)


@click.command()
@click.option("--site", "which", flag_value="site",
              help="The site file's schema instead (configs/schema/site.schema.json).")
@click.option("--registry", "which", flag_value="registry",
              help="The runtime registry's schema instead (configs/schema/runtimes.schema.json).")
@json_option
def schema(which, as_json):
    """Print the JSON Schema of config.yaml, or of the site file (--site) or the runtime
    registry (--registry) (JSON with or without --json)."""
    if which == "site":
        doc = contracts.schema(contracts.SITE_SCHEMA)
    elif which == "registry":
        doc = contracts.schema(contracts.REGISTRY_SCHEMA)
    else:
        doc = load_schema()
    click.echo(json.dumps(doc, indent=2))
