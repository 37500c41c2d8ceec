"""Containers for real: the whole job side in Slurm's own OCI containers (`srun --container`,
oci.conf + runc, scripts/sf-oci-run) on the dev cluster.

The runtime is the one scripts/build-runtime publishes beside the venvs: an OCI bundle built
by scripts/build-container (Debian 12 rootfs + the verl-0.9.1 venv's packages in a venv of
the rootfs' own python at /opt/sf/runtime), in $SF_DEV_STATE/runtimes-container.yaml. Every
job here runs on it (FORGE_RUNTIME_REGISTRY_FILE). The batch script stays on the host.

Proof that a step ran in the container: /etc/sf-container exists only in the bundle's rootfs
(not on the host), and the container's python is the rootfs' Debian 3.11 under
/opt/sf/runtime, which does not exist on the host. (SLURM_CONTAINER proves nothing: Slurm
sets it even when no oci.conf made a container.)

  - examples/grpo and examples/distill with --preflight: one Ray cluster across the het
    groups, every node, the barrier and the preflight in the container; token auth, private
    temp dirs and port blocks as with a venv;
  - a model the container cannot see: the preflight names the path and the mount;
  - requeue (`scontrol requeue`) and cancel of a containerised job: the driver runs in the
    container in both attempts; `sf attach RUN -- CMD` runs in the container (ray status with
    the job's token); after scancel no container of the job is left (runc list);
  - a killed driver restarted in place, in containers; a frozen driver found by the watchdog
    and every node's stacks dumped by the container's py-spy; sf export and sf eval.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402
    FROZEN,
    REPO,
    experiment,
    job_state,
    phases,
    sf,
    submit_driver,
    wait_event,
    wait_json,
    wait_state,
    wait_steps,
    wait_until,
    watchdog_experiment,
)

STATE = Path(os.environ.get("SF_DEV_STATE", "/var/lib/sfdev"))
REGISTRY = STATE / "runtimes-container.yaml"
RUNC_ROOT = "/run/sfdev-runc/root"  # scripts/dev-cluster's oci.conf: /run/sfdev-runc/%u
MARKER = "/etc/sf-container"
CT_PYTHON = "/opt/sf/runtime/bin/python"


@pytest.fixture(scope="module")
def bundle() -> Path:
    """The published container runtime; fails (never skips) when it is missing."""
    if not REGISTRY.is_file():
        pytest.fail(f"{REGISTRY} is missing: scripts/build-runtime publishes it (needs runc, debootstrap: "
                    "scripts/install)", pytrace=False)
    entry = yaml.safe_load(REGISTRY.read_text())["verl"]["0.9.1"]
    assert entry["kind"] == "oci" and entry["python"] == CT_PYTHON, entry
    path = Path(entry["bundle"])
    assert (path / "config.json").is_file() and (path / "rootfs" / MARKER.lstrip("/")).is_file()
    assert (STATE / "etc" / "oci.conf").is_file(), "scripts/dev-cluster up writes oci.conf"
    assert not Path(MARKER).exists() and not Path(CT_PYTHON).exists()  # the proof only holds if the host lacks them
    return path


def ct_env(**extra) -> dict:
    return {"FORGE_RUNTIME_REGISTRY_FILE": str(REGISTRY), **extra}


def submit_wait(*args, env=None) -> dict:
    proc = sf("submit", *args, "--wait", "--json", env=ct_env(**(env or {})), timeout=420)
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    out["rc"], out["stderr"] = proc.returncode, proc.stderr
    assert "run" in out, (proc.stdout[-3000:], proc.stderr[-3000:])
    out["run_dir"] = str(Path(os.environ["SF_RUNS_DIR"]) / out["run"])
    return out


def rootfs_python_version(bundle: Path) -> str:
    cfg = (bundle / "rootfs" / "opt" / "sf" / "runtime" / "pyvenv.cfg").read_text()
    return next(line.split("=", 1)[1].strip() for line in cfg.splitlines() if line.startswith("version"))


@pytest.mark.parametrize("example, count", [("grpo", 2), ("distill", 3)])
def test_examples_preflight_in_containers(bundle, example, count):
    out = submit_wait(f"examples/{example}", "--preflight")
    run_dir = Path(out["run_dir"])
    assert out["rc"] == 0, out["stderr"][-3000:]
    report = json.loads((run_dir / "preflight.json").read_text())
    assert report["ok"], report["failures"]
    nodes = set(report["gpu_ids"])
    assert len(nodes) == count, report["gpu_ids"]
    # one Ray cluster over every node of every het group
    assert report["ray_nodes"] == len(nodes) and set(report["paths"]) == nodes, report["paths"]
    # the preflight (driver step) and a Ray task on every node ran in the container, on its python
    where = report["runtime"]
    version = rootfs_python_version(bundle)
    for name, w in [("driver", where["driver"]), *where["nodes"].items()]:
        assert w["container"] == "sf container: verl 0.9.1", (name, w)
        assert w["python"] == CT_PYTHON and w["python_version"] == version, (name, w)
    assert set(where["nodes"]) == nodes
    # every path the job reads was checked inside: the run dir (writable) and the model
    for node in nodes:
        assert report["paths"][node][str(run_dir)]["writable"] is True
        assert report["paths"][node][str(REPO / "examples" / "assets" / "model")]["readable"] is True
    events = phases(run_dir)
    joined = next(e for e in events if e["phase"] == "all_joined")
    assert set(joined["pools"]) == {"train"} | ({"teach"} if example == "distill" else set())
    head = next(e for e in events if e["phase"] == "head_up")
    # a port block of the site's range on a loopback address of the namespace, as with a venv
    host, port = head["address"].rsplit(":", 1)
    assert host.startswith("127.0.0.") and 20000 <= int(port) <= 59999, head
    # nodes stop by themselves when the job is done: sf's USR2 reached them through runc
    assert not [e for e in events if e["phase"] == "node_exit"], [e for e in events if e["phase"] == "node_exit"]
    log = "\n".join(p.read_text(errors="replace") for p in (run_dir / "logs").glob("*-ray-*.log"))
    # Ray's sessions in the node's private temp dir (launcher/injob/private.py), token auth on
    assert "/tmp/ray/" not in log and "session_" in log
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["job"]["runtime"]["kind"] == "oci" and plan["job"]["runtime"]["image"] == str(bundle)
    script = (run_dir / "job.sbatch").read_text()
    assert "--container" not in script  # the batch script itself stays on the host
    print(f"\n{example} in containers: Ray up (all joined) in {joined['seconds']:.1f}s, "
          f"preflight {report['seconds']}s")


def test_a_bundle_built_from_a_sites_own_image_runs_the_job(bundle, tmp_path):
    """scripts/build-container --rootfs: a site's own image (here the published bundle's
    rootfs, as `podman export | tar -x` would give it) with its own python, no venv put in:
    the whole preflight runs in it."""
    image_bundle = STATE / "containers" / f"image-{tmp_path.name}"
    try:
        proc = subprocess.run(["bash", str(REPO / "scripts" / "build-container"), "--rootfs", str(bundle / "rootfs"),
                               "--python", CT_PYTHON, "--out", str(image_bundle), "0.9.1"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        marker = (image_bundle / "rootfs" / MARKER.lstrip("/")).read_text()
        assert f"packages from: the image {bundle / 'rootfs'}" in marker, marker
        # the image tree itself is untouched (hard links, the marker replaced, not written through)
        assert "packages from: the image" not in (bundle / "rootfs" / MARKER.lstrip("/")).read_text()
        config = json.loads((image_bundle / "config.json").read_text())
        assert config["annotations"]["org.sf.python"] == CT_PYTHON
        entry = yaml.safe_load(REGISTRY.read_text())["verl"]["0.9.1"]
        registry = tmp_path / "runtimes.yaml"
        registry.write_text(yaml.safe_dump({"verl": {"0.9.1": {**entry, "bundle": str(image_bundle)}}}))
        out = submit_wait("examples/grpo", "--preflight", env={"FORGE_RUNTIME_REGISTRY_FILE": str(registry)})
        assert out["rc"] == 0, out["stderr"][-3000:]
        report = json.loads((Path(out["run_dir"]) / "preflight.json").read_text())
        assert report["ok"] and report["ray_nodes"] == 2, report["failures"]
        for w in [report["runtime"]["driver"], *report["runtime"]["nodes"].values()]:
            assert w["container"] == "sf container: verl 0.9.1" and w["python"] == CT_PYTHON, w
        plan = json.loads((Path(out["run_dir"]) / "plan.json").read_text())
        assert plan["job"]["runtime"]["image"] == str(image_bundle)
    finally:
        shutil.rmtree(image_bundle, ignore_errors=True)


def test_preflight_names_a_path_the_container_cannot_see(bundle, tmp_path):
    outside = STATE / "ct-unmounted" / tmp_path.name
    try:
        shutil.copytree(REPO / "examples" / "assets" / "model", outside / "model")
        data = yaml.safe_load((REPO / "examples" / "grpo" / "config.yaml").read_text())
        assets = REPO / "examples" / "assets"
        data["model"] = str(outside / "model")
        # two validation files that exist nowhere: one under a folder the bundle mounts (the
        # repo), one under a folder it does not: both wrong paths, neither a missing mount
        typo = assets / "data" / "tset.parquet"
        nowhere = outside / "data" / "test.parquet"
        data["data"] = {"train": {"files": str(assets / "data" / "train.parquet")},
                        "validation": {"files": [str(typo), str(nowhere)]}}
        data["spec"]["resources"]["pools"] = [{"name": "train", "series": "fake", "nodes": 1, "gpus_per_node": 4}]
        exp = tmp_path / "unseen"
        exp.mkdir()
        (exp / "config.yaml").write_text(yaml.safe_dump(data))
        os.chmod(tmp_path, 0o755)
        out = submit_wait(str(exp), "--preflight")
        assert out["rc"] != 0
        report = json.loads((Path(out["run_dir"]) / "preflight.json").read_text())
        unseen = {f.split(": ", 1)[1].split(" ", 1)[0]: f for f in report["failures"] if f.startswith("paths on ")}
        assert set(unseen) == {str(outside / "model"), str(typo), str(nowhere)}, report["failures"]
        model = unseen[str(outside / "model")]
        assert f"exists on the host but is not mounted in the container (OCI bundle {bundle}): add a mount" in model
        assert f"scripts/build-container --mount {STATE / 'ct-unmounted'} 0.9.1" in model, model
        for path, gap in ((typo, ""), (nowhere, f" ({outside / 'data'} is missing there)")):
            line = unseen[str(path)]
            assert line.endswith(f"{path} does not exist on the host{gap}: fix the path in config.yaml "
                                 "(data.val_files)"), line
            assert "add a mount" not in line and "build-container" not in line, line
        print("\n" + "\n".join(unseen.values()))
    finally:
        shutil.rmtree(outside, ignore_errors=True)


DRIVER = r"""
n="${SLURM_RESTART_COUNT:-0}"
cat /etc/sf-container > "$FORGE_CLUSTER_RUN_DIR/driver-where-$n.txt" 2>&1
echo "container test driver: attempt $n"
if [ "$n" -ge "${SF_TEST_FINISH_AT:-99}" ]; then exit 0; fi
exec sleep 600
"""


def one_node_experiment(tmp_path: Path, **slurm) -> str:
    """A one-node GRPO experiment, requeued up to 3 times."""
    return experiment(tmp_path, "ct1", max_requeues=3, **slurm)


def submit_ct_driver(exp: str, finish_at: int) -> tuple[Path, str]:
    """EXP on the container runtime with DRIVER: its run dir and job id."""
    _run, run_dir, job = submit_driver(exp, DRIVER, **ct_env(SF_TEST_FINISH_AT=str(finish_at)))
    return run_dir, job


def containers_of(job: str) -> list[str]:
    """The runc containers of the job still known (ids NODE.USER.JOB.STEP.TASK)."""
    proc = subprocess.run(["runc", f"--root={RUNC_ROOT}", "list", "-q"], capture_output=True, text=True)
    return [c for c in proc.stdout.split() if c.split(".")[2:3] == [job]]


def wait_driver_file(run_dir: Path, attempt: int, timeout: float = 30) -> str:
    """What attempt `attempt`'s driver wrote about where it runs, once it has written it."""
    path = run_dir / f"driver-where-{attempt}.txt"
    return wait_until(lambda: path.exists() and path.read_text().strip(), timeout, f"no {path}", interval=0.3)


def test_requeue_of_a_containerised_job(bundle, tmp_path):
    run_dir, job = submit_ct_driver(one_node_experiment(tmp_path), finish_at=1)
    try:
        wait_event(run_dir, "driver_started", restart=0)
        assert "sf container: verl 0.9.1" in wait_driver_file(run_dir, 0)
        assert containers_of(job), "the job's steps are runc containers"
        subprocess.run(["scontrol", "requeue", job], check=True)
        wait_event(run_dir, "restarted", restart=1)
        wait_event(run_dir, "driver_started", restart=1)
        assert "sf container: verl 0.9.1" in wait_driver_file(run_dir, 1)  # the new attempt's driver: inside too
        assert wait_state(job, {"COMPLETED", "FAILED"}) == "COMPLETED"
        ended = [e for e in phases(run_dir) if e["phase"] == "ended"]
        assert [e.get("ending") for e in ended if e.get("restart", 0) == 0][-1] == "requeued", ended
        assert ("all_joined", 1) in [(e["phase"], e.get("restart", 0)) for e in phases(run_dir)]
        wait_until(lambda: not containers_of(job), 30, lambda: f"containers left: {containers_of(job)}")
    finally:
        if job_state(job) not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "UNKNOWN"):
            subprocess.run(["scancel", job], check=False)


def test_cancel_of_a_containerised_job_leaves_no_container(bundle, tmp_path):
    run_dir, job = submit_ct_driver(one_node_experiment(tmp_path), finish_at=99)
    try:
        wait_event(run_dir, "driver_started", restart=0)
        assert "sf container: verl 0.9.1" in wait_driver_file(run_dir, 0)
        running = containers_of(job)
        assert len(running) >= 2, running  # the head's Ray node and the driver
        # sf attach: a command in the running job, in the container, with Ray's token
        probe = ("head -1 /etc/sf-container; python3 -c 'import ray; ray.init(logging_level=\"ERROR\"); "
                 "print(\"alive\", sum(n[\"Alive\"] for n in ray.nodes()))'")
        att = sf("attach", run_dir.name, "--", "sh", "-c", probe, env=ct_env())
        assert att.returncode == 0 and "sf container: verl 0.9.1" in att.stdout and "alive 1" in att.stdout, \
            att.stdout[-2000:] + att.stderr[-2000:]
        subprocess.run(["scancel", job], check=True)
        assert wait_state(job, {"CANCELLED", "COMPLETED", "FAILED"}) == "CANCELLED"
        deadline = time.monotonic() + 30
        while containers_of(job) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not containers_of(job)
        # no process of the job left on the host (the driver's sleep, Ray) once Slurm is done
        procs = subprocess.run(["pgrep", "-af", str(run_dir)], capture_output=True, text=True).stdout
        assert not procs.strip(), procs
    finally:
        if job_state(job) not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "UNKNOWN"):
            subprocess.run(["scancel", job], check=False)


EXPORT_VENV = STATE / "export-test-venv"
EXPORT_BUNDLE = STATE / "containers" / "export-test"  # scripts/test builds it from the export test venv


def test_export_then_eval_in_containers(slurm, tmp_path):
    """sf export (verl's merger) and sf eval on an oci runtime: their steps are `srun
    --container` steps whose python, /opt/sf/runtime/bin/python, exists only in the bundle."""
    from launcher import runs

    if not (EXPORT_BUNDLE / "config.json").is_file():
        pytest.fail(f"no {EXPORT_BUNDLE}: scripts/test builds it (scripts/build-container --out {EXPORT_BUNDLE} "
                    f"0.9.1 {EXPORT_VENV})", pytrace=False)
    fixtures = REPO / "tests" / "unit" / "fixtures_extra"
    runs_dir = STATE / "runs" / f"test-ct-export-{os.getpid()}"
    registry = tmp_path / "runtimes.yaml"
    registry.write_text(f'verl:\n  "0.9.1": {{kind: oci, bundle: {EXPORT_BUNDLE}, python: {CT_PYTHON}}}\n')
    e = {**os.environ, "SF_RUNS_DIR": str(runs_dir), "FORGE_RUNTIME_REGISTRY_FILE": str(registry),
         "SF_SITE": str(REPO / "site" / "dev.yaml")}
    e.pop("FORGE_IMAGE_VERL", None)

    def sf_(*args):
        return subprocess.run([sys.executable, "-m", "launcher.cli.app", *args], capture_output=True, text=True,
                              env=e, timeout=120, cwd=REPO)
    try:
        ckpt = runs_dir / "ckpt-src"
        subprocess.run([str(EXPORT_VENV / "bin" / "python"), str(fixtures / "make_checkpoint.py"), str(ckpt), "4"],
                       check=True, capture_output=True)
        proc = sf_("export", "tiny", "--checkpoint", str(ckpt), "--checkpoint-format", "verl-fsdp")
        assert proc.returncode == 0, proc.stderr
        job_id = proc.stdout.split("submitted export job ")[1].split()[0]
        states = slurm.wait_terminal(job_id, timeout=300)
        run = [r for r in runs.list_runs(runs_dir) if r.raw_record().get("task") == "export"][0]
        [exp] = run.record()["exports"]
        log = Path(exp["log"]).read_text() if Path(exp["log"]).exists() else ""
        assert states[job_id] == "COMPLETED", log[-3000:]
        script = next(Path(run.dir).rglob("*.sbatch")).read_text()
        assert f"--container={EXPORT_BUNDLE}" in script and CT_PYTHON in script, script
        check = subprocess.run([str(EXPORT_VENV / "bin" / "python"), str(fixtures / "check_merged.py"),
                                exp["target"], str(ckpt / "reference.pt")], capture_output=True, text=True)
        assert "ok 27 tensors" in check.stdout, check.stderr[-2000:]

        val = runs_dir / "val.jsonl"
        val.write_text(json.dumps({"messages": [{"role": "user", "content": "what is one plus two ?"},
                                                {"role": "assistant", "content": "three"}]}) + "\n")
        sft = runs.create_run(runs_dir, "tiny-sft")
        sft.write_json("plan.json", {"method": "sft", "framework_version": "0.9.1",
                                     "overrides": [f"data.val_files={val}"]})
        proc = sf_("eval", "tiny-sft", "--run-id", sft.id, "--model", exp["target"], "--max-new-tokens", "3")
        assert proc.returncode == 0, proc.stderr
        job_id = proc.stdout.split("submitted eval job ")[1].split()[0]
        states = slurm.wait_terminal(job_id, timeout=300)
        [ev] = sft.record()["evals"]
        assert states[job_id] == "COMPLETED", Path(ev["log"]).read_text()[-3000:]
        summary = json.loads(Path(ev["summary"]).read_text())
        assert summary["samples"] == 1 and summary["val_loss"] > 0
    finally:
        shutil.rmtree(runs_dir, ignore_errors=True)


TRAINER = r'''
import json, os, sys, time

k = int(os.environ.get("SF_RESTART_IN_PLACE") or 0)
run_dir = os.environ["FORGE_CLUSTER_RUN_DIR"]
with open(os.path.join(run_dir, f"driver-{k}.json"), "w") as f:
    json.dump({"pid": os.getpid(), "python": sys.executable, "time": time.time(),
               "container": open("/etc/sf-container").readline().strip()}, f)
with open(os.environ["VERL_FILE_LOGGER_PATH"], "w") as log:  # two training steps: a restart is worth it
    for step in (2 * k + 1, 2 * k + 2):
        log.write(json.dumps({"step": step, "data": {"actor/pg_loss": 0.1}}) + "\n")
        log.flush()
if k >= 1:
    sys.exit(0)
time.sleep(600)
'''


def test_killed_driver_restarts_in_place_in_the_container(bundle, tmp_path):
    """Restart in place on an oci runtime: the driver (a container step; `python3` there is
    the container's) killed, Ray and the driver come up again in the same job, in containers."""
    exp = one_node_experiment(tmp_path, max_restarts_in_place=1)
    Path(exp, "trainer.py").write_text(TRAINER)
    proc = sf("submit", exp, "--json", env=ct_env(SF_TEST_DRIVER=f'exec python3 {exp}/trainer.py "$@"'))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    run_dir, job = Path(out["run_dir"]), out["job_id"]
    try:
        first = wait_json(run_dir / "driver-0.json", timeout=150)
        # its two steps logged: a restart is worth it (the supervisor reads them to the end)
        wait_steps(run_dir, "attempt-0.jsonl", 2)
        assert first["python"].startswith("/opt/sf/runtime/bin/python") and first["container"], first
        os.kill(first["pid"], 9)  # host PIDs: the container shares the host's PID namespace
        wait_event(run_dir, "restarted_in_place", restart=0, timeout=150)
        wait_json(run_dir / "driver-1.json", timeout=150)
        assert wait_state(job, {"COMPLETED", "FAILED"}, timeout=120) == "COMPLETED"
        joined = [e for e in phases(run_dir) if e["phase"] == "all_joined"]
        assert len(joined) == 2 and {e["job_id"] for e in joined} == {job}  # Ray up again, same job
        again = json.loads((run_dir / "driver-1.json").read_text())
        assert again["container"] == "sf container: verl 0.9.1", again
    finally:
        if job_state(job) not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "UNKNOWN"):
            subprocess.run(["scancel", job], check=False)


def test_hang_in_containers_is_found_and_its_stacks_saved(bundle, tmp_path):
    """The progress watchdog on an oci runtime: a frozen driver with an actor on each of 2
    nodes is found, and py-spy, run in a container step on every node, dumps the stacks."""
    exp = watchdog_experiment(tmp_path, "ctfrozen", nodes=2, hang_timeout_s=20, first_step_timeout_s=180,
                              max_requeues=1)
    assert "freeze_in_rollout" in FROZEN
    proc = sf("submit", exp, "--json", env=ct_env(SF_TEST_DRIVER=f"exec python3 {exp}/frozen.py",
                                                  SF_TEST_FINISH_AT="1"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    run_dir, job = Path(out["run_dir"]), out["job_id"]
    try:
        hang = wait_event(run_dir, "hang", restart=0, timeout=240)
        saved = wait_event(run_dir, "stacks_saved", restart=0, timeout=120)
        hosts = next(e for e in phases(run_dir) if e["phase"] == "allocated")["pools"]["train"]
        assert sorted(saved["nodes"]) == sorted(hosts), (saved, hosts)
        stacks = run_dir / hang["stacks"]
        head_text, worker_text = (stacks / f"{hosts[0]}.txt").read_text(), (stacks / f"{hosts[1]}.txt").read_text()
        assert "freeze_in_rollout" in head_text, head_text
        assert "generate_sequences" in head_text and "generate_sequences" in worker_text, worker_text
        assert "/opt/sf/runtime/bin/py-spy" in head_text  # the container's py-spy
        # the requeue is recorded after the stacks are saved: wait for it, not read it at once
        requeued = wait_event(run_dir, "requeued", timeout=60)
        assert requeued["cause"] == "hang", requeued
        wait_event(run_dir, "driver_started", restart=1, timeout=180)  # the next attempt, in containers too
        assert wait_state(job, {"COMPLETED", "FAILED"}, timeout=120) == "COMPLETED"
    finally:
        if job_state(job) not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "UNKNOWN"):
            subprocess.run(["scancel", job], check=False)


def test_a_container_that_never_starts_names_the_job_output_not_a_node_log(bundle, tmp_path):
    """A Ray node's container that fails to start writes no node log: the ending says so and
    names the Slurm job's output file, where srun's error is, never a logs/<job>-ray-*.log that
    does not exist. The bundle is the published one plus an OCI prestart hook that refuses the
    containers of Ray node steps only (`launcher.injob node`): the barrier's and the driver's
    start, so the node step's ending is the one the job reports."""
    broken = STATE / "ct-broken" / tmp_path.name
    try:
        broken.mkdir(parents=True)
        # the same rootfs, hard-linked (0.4 s): runc refuses a symlinked one, and Slurm reads
        # the rootfs from the bundle folder whatever config.json says
        subprocess.run(["cp", "-al", str(bundle / "rootfs"), str(broken / "rootfs")], check=True)
        config = json.loads((bundle / "config.json").read_text())
        refuse = ("import json, sys; state = json.load(sys.stdin); "
                  "args = json.load(open(state['bundle'] + '/config.json'))['process']['args']; "
                  "sys.exit('sf test hook: a Ray node container that does not start' "
                  "if 'launcher.injob' in args and 'node' in args else 0)")
        config.setdefault("hooks", {}).setdefault("prestart", []).append(
            {"path": "/usr/bin/python3", "args": ["python3", "-c", refuse]})
        (broken / "config.json").write_text(json.dumps(config))
        registry = tmp_path / "runtimes.yaml"
        registry.write_text(REGISTRY.read_text().replace(str(bundle), str(broken)))
        os.chmod(tmp_path, 0o755)
        proc = sf("submit", one_node_experiment(tmp_path), "--wait", "--json",
                  env={"FORGE_RUNTIME_REGISTRY_FILE": str(registry)}, timeout=420)
        out = json.loads(proc.stdout[proc.stdout.index("{"):])
        assert proc.returncode != 0, out
        run_dir = Path(os.environ["SF_RUNS_DIR"]) / out["run"]
        job = out["job_id"]
        reason = out.get("reason") or ""
        node_logs = sorted(p.name for p in (run_dir / "logs").glob(f"{job}-ray-*.log"))
        assert node_logs == [], node_logs
        assert reason.startswith("Ray node ") and "(srun ray-head exited with 1)" in reason, reason
        assert "ray-*" not in reason and ".log" not in reason, reason
        assert "wrote no node log: sf's node wrapper never started there" in reason, reason
        output = f"logs/slurm-{job}.out"
        assert f"srun's own error is in {output}" in reason, reason
        assert "a Ray node container that does not start" in (run_dir / output).read_text(), reason
        print(f"\nreason: {reason}")
    finally:
        shutil.rmtree(broken, ignore_errors=True)
