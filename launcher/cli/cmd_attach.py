"""`sf attach RUN` and `sf dashboard RUN`: into a running job (launcher.monitor.attach).

    sf attach RUN [--node NAME | --role head|actor|teacher|...] [--print] [-- CMD ...]
    sf dashboard RUN [--local-port 8265]
"""

from __future__ import annotations

import getpass
import socket

import click

from launcher import ray_facts, runs
from launcher.cli.options import complete_run_ids, json_option, nonblank, print_json, runs_options
from launcher.errors import SpecError
from launcher.monitor import attach as att
from launcher.monitor import poll as monitor
from launcher.runtime import Runtime
from launcher.spec.site import load_site, runs_root
from launcher.states import SLURM_RUNNING


def _running(run_id: str, site_path, runs_dir):
    """(run, record, Where, site) of a running run; SpecError naming its state otherwise."""
    site = load_site(site_path)
    run = runs.open_run(runs_root(runs_dir, site, site_path), run_id)
    rec = run.record()
    if rec.get("kind") == "sweep":
        raise SpecError("run", f"{run.id} is a sweep; attach to one of its runs (`sf status {run.id}`)")
    status = monitor.poll([run], write_back=False)[0]
    if status.slurm_state != SLURM_RUNNING:
        raise SpecError("run", f"run {run.id} is not running (state {status.state}"
                        + (f", Slurm {status.slurm_state}" if status.slurm_state else "")
                        + "); `sf attach` needs a running job: see `sf status " + run.id + "`")
    return run, rec, att.where(rec, runs.read_phases(run.dir), run.read_plan()), site


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("run_id", metavar="RUN", shell_complete=complete_run_ids)
@click.option("--node", metavar="NAME", callback=nonblank("a node of the job"),
              help="A node of the job (any het group); default: the Ray head.")
@click.option("--role", metavar="ROLE", callback=nonblank("head, a role or a pool name"),
              help="head, or a role of a pool (actor, rollout, teacher, ...) or a pool name.")
@click.option("--print", "print_only", is_flag=True, help="Print the srun command instead of running it.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- CMD ...]")
@json_option
@runs_options
def attach(run_id, node, role, print_only, command, as_json, site_path, runs_dir):
    """A shell inside a running job (an overlapping srun step on one of its nodes).

    \b
    The shell has the run's runtime, SF_RUN_DIR, RAY_ADDRESS and Ray's token
    (RAY_AUTH_MODE, RAY_AUTH_TOKEN_PATH), so `ray status` and the run's python work.
    With `-- CMD ...` it runs CMD there instead (no terminal). For a het job --node
    reaches any het group's nodes (srun --het-group). Leaving the shell leaves the job.
    --json prints the target and the srun command as JSON and runs nothing (as --print).
    Examples:
      sf attach grpo-abcde                 # the Ray head
      sf attach grpo-abcde --role teacher  # the first node of the teacher pool
      sf attach grpo-abcde --node dev2 -- ray status
    """
    run, rec, where, site = _running(run_id, site_path, runs_dir)
    host, het_group = att.target(where, node, role)
    runtime = Runtime.from_dict(rec.get("runtime") or {"framework": "verl", "version": "?", "kind": "module"})
    token = ray_facts.token_path(str(run.dir), where.job_id).exists()
    argv = att.shell_argv(str(run.dir), where, runtime, host, het_group, tuple(command),
                          site_env=site.env, token_exists=token)
    if as_json:
        print_json({"ok": True, "run": run.id, "job_id": where.job_id, "node": host, "het_group": het_group,
                    "argv": list(argv), "command": att.printable(argv)})
        return
    if print_only:
        click.echo(att.printable(argv))
        return
    if not where.head_address:
        click.echo(f"sf: warning: Ray is not up yet in job {where.job_id}; RAY_ADDRESS is not set", err=True)
    if not token:
        click.echo(f"sf: warning: no Ray token in {ray_facts.token_path(str(run.dir), where.job_id).parent}; "
                   "RAY_AUTH_* are not set", err=True)
    att.enter(argv, run, rec, where.job_id)  # refused unless Slurm shows the job is this run's


@click.command()
@click.argument("run_id", metavar="RUN", shell_complete=complete_run_ids)
@click.option("--local-port", default=8265, show_default=True, type=click.IntRange(1024, 65535),
              help="The port on your machine.")
@json_option
@runs_options
def dashboard(run_id, local_port, as_json, site_path, runs_dir):
    """Print the ssh port-forward to a running job's Ray dashboard (where the site enables it)."""
    site = load_site(site_path)
    if not (site.raw.get("ray") or {}).get("dashboard"):
        raise SpecError("site.ray.dashboard", f"site {site.name} does not start the Ray dashboard; an admin "
                        f"enables it with `ray: {{dashboard: true}}` in {site.path}")
    run, _rec, where, _site = _running(run_id, site_path, runs_dir)
    if as_json:
        print_json({"ok": True, "run": run.id, "ssh": att.dashboard_line(where, socket.getfqdn(), getpass.getuser(),
                                                                          local_port),
                    "url": f"http://localhost:{local_port}",
                    "token_file": str(ray_facts.token_path(str(run.dir), where.job_id))})
        return
    click.echo(att.dashboard_line(where, socket.getfqdn(), getpass.getuser(), local_port))
    click.echo(f"then open http://localhost:{local_port} (the dashboard asks for Ray's token: "
               f"cat {ray_facts.token_path(str(run.dir), where.job_id)})")
