"""The `oci` runtime kind (Slurm's own --container) and scripts/sf-oci-run, oci.conf's
RunTimeRun wrapper: pure parts, no Slurm, no runc."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
from pathlib import Path

import pytest

from launcher.errors import SpecError
from launcher.runtime import Runtime
from launcher.spec.runtimes import resolve_runtime
from launcher.spec.site import site_from_dict

REPO = Path(__file__).resolve().parents[2]


def oci_run():
    loader = importlib.machinery.SourceFileLoader("sf_oci_run", str(REPO / "scripts" / "sf-oci-run"))
    spec = importlib.util.spec_from_loader("sf_oci_run", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def site(registry):
    return site_from_dict({"name": "s", "runs_dir": "/r", "series": {}, "runtime_registry": registry})


def bundle(tmp_path, mounts=("/data", "/runs")):
    b = tmp_path / "bundle"
    (b / "rootfs").mkdir(parents=True)
    config = {"root": {"path": "rootfs"}, "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}]
              + [{"destination": m, "type": "bind", "source": m, "options": ["rbind"]} for m in mounts]}
    (b / "config.json").write_text(json.dumps(config))
    return b


def test_oci_kind_renders_container_steps(tmp_path):
    b = bundle(tmp_path)
    reg = tmp_path / "runtimes.yaml"
    reg.write_text(f'verl:\n  "0.9.1": {{kind: oci, bundle: {b}, python: /opt/sf/runtime/bin/python}}\n')
    rt = resolve_runtime("verl", "0.9.1", site(str(reg)), environ={})
    assert rt.kind == "oci" and rt.in_container
    assert rt.srun_flags() == [f"--container={b}"]
    assert rt.wrap(["x", "y"]) == ["x", "y"]
    assert rt.local_argv(["x"]) is None  # the driver and the preflight are srun steps in the container
    assert rt.activate_lines() == [] and rt.host_python("/opt/sf/bin/python") == "/opt/sf/bin/python"
    assert rt.runtime_python() == "/opt/sf/runtime/bin/python"
    assert rt.mounts == ("/data", "/runs")  # read from the bundle's config.json
    assert Runtime.from_dict(json.loads(json.dumps(rt.to_dict()))) == rt  # the job side reads it back


@pytest.mark.parametrize("entry, word", [
    ("{kind: oci, bundle: /b}", "python"),
    ("{kind: oci, bundle: rel/b, python: /p}", "bundle"),
    ("{kind: oci, bundle: /b, python: python3}", "python"),
])
def test_oci_kind_refuses_incomplete_entries(tmp_path, entry, word):
    reg = tmp_path / "runtimes.yaml"
    reg.write_text(f'verl:\n  "0.9.1": {entry}\n')
    with pytest.raises(SpecError) as err:
        resolve_runtime("verl", "0.9.1", site(str(reg)), environ={})
    assert word in str(err.value)


def test_export_wraps_oci_in_an_srun_step(tmp_path, monkeypatch):
    from launcher.submit import export

    b = bundle(tmp_path)
    reg = tmp_path / "runtimes.yaml"
    reg.write_text(f'verl:\n  "0.9.1": {{kind: oci, bundle: {b}, python: /opt/sf/runtime/bin/python}}\n')
    monkeypatch.setenv("FORGE_RUNTIME_REGISTRY_FILE", str(reg))
    _, _, _, wrap = export.runtime_parts(site(str(reg)), "0.9.1")
    assert wrap(["python", "-m", "m"]) == ["srun", "--ntasks=1", f"--container={b}",
                                           "/opt/sf/runtime/bin/python", "-m", "m"]


def test_hostlists_and_gpus():
    m = oci_run()
    assert m.expand_hostlist("dev[1-3,7],gpu-a,n[08-10]") == ["dev1", "dev2", "dev3", "dev7", "gpu-a",
                                                               "n08", "n09", "n10"]
    show = ("JobId=5 ... Nodes=dev[1-2] CPU_IDs=0-15 Mem=4096 GRES=gpu:4(IDX:0-3) "
            "Nodes=dev7 CPU_IDs=0-15 Mem=4096 GRES=gpu:2(IDX:1,3) ")
    assert m.node_gpus(show, "dev2") == ["0", "1", "2", "3"]
    assert m.node_gpus(show, "dev7") == ["1", "3"]
    assert m.node_gpus(show.replace("GRES=gpu:2(IDX:1,3)", "GRES="), "dev7") is None
    assert m.node_gpus(show, "dev9") is None


def test_rewrite_gives_the_node_its_identity(tmp_path):
    m = oci_run()
    b = bundle(tmp_path, mounts=(str(tmp_path),))
    config = json.loads((b / "config.json").read_text())
    config["root"]["path"] = str(b / "rootfs")
    # what 22.05 writes: the batch shell's per-task values leaked in, the step's nodelist
    config["process"] = {"env": ["PATH=/opt/sf/runtime/bin:/usr/bin", "PATH=/host/venv/bin:/usr/bin",
                                 "SLURMD_NODENAME=dev1", "SLURM_PROCID=0", "CUDA_VISIBLE_DEVICES=0,1",
                                 "SLURM_JOB_GPUS=0,1", "SLURM_STEP_NODELIST=dev[1-2]", f"PWD={tmp_path}"],
                         "capabilities": {"bounding": ["CAP_KILL", "CAP_SYS_RESOURCE"]}}
    out = m.rewrite(config, "dev2", "7", gpus_of=lambda job, node, env: ["2", "3"] if (job, node) == ("7", "dev2")
                    else None)
    env = dict(e.split("=", 1) for e in out["process"]["env"])
    assert env["SLURMD_NODENAME"] == "dev2" and env["SLURM_PROCID"] == env["SLURM_NODEID"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == env["SLURM_STEP_GPUS"] == "2,3" and env["SLURM_LOCALID"] == "0"
    assert out["process"]["cwd"] == str(tmp_path)  # a mounted cwd is kept
    assert env["PATH"] == "/opt/sf/runtime/bin:/usr/bin:/host/venv/bin"  # the bundle's first
    config["process"]["env"] = ["SLURMD_NODENAME=dev1", "CUDA_VISIBLE_DEVICES=0", "SLURM_JOB_GPUS=0", "PWD=/nowhere"]
    out = m.rewrite(config, "dev5", "7", gpus_of=lambda *a: None)
    env = dict(e.split("=", 1) for e in out["process"]["env"])
    assert "CUDA_VISIBLE_DEVICES" not in env  # a leaked batch value is dropped, never kept
    assert env["SLURMD_NODENAME"] == "dev5" and out["process"]["cwd"] == "/"


def test_caps_limited_to_the_bounding_set():
    m = oci_run()
    allowed = m.bounding_caps("CapBnd:\t000001fffeffffff\n")
    assert "CAP_SYS_ADMIN" in allowed and "CAP_SYS_RESOURCE" not in allowed  # bit 24 off
    config = {"process": {"capabilities": {"bounding": ["CAP_SYS_ADMIN", "CAP_SYS_RESOURCE"]}}}
    m.limit_caps(config, allowed)
    assert config["process"]["capabilities"]["bounding"] == ["CAP_SYS_ADMIN"]


def test_preflight_names_the_mount_that_fixes_an_unseen_path(tmp_path):
    from launcher.injob import mounts, preflight

    (tmp_path / "models").mkdir()
    unseen = tmp_path / "models" / "gone" / "model"
    assert mounts.first_missing(str(unseen)) == str(tmp_path / "models" / "gone")
    assert mounts.first_missing(str(tmp_path)) is None
    oci = {"kind": "oci", "image": "/b/verl", "version": "0.9.1", "mounts": ["/work", "/runs"]}
    report = {"dev1": preflight.check_paths_here([str(unseen), str(tmp_path)], writable=(str(tmp_path),))}
    assert report["dev1"][str(tmp_path)] == {"exists": True, "readable": True, "writable": True}
    [line] = preflight.path_failures(report, oci)  # the batch host has it: a mount is missing
    assert line.startswith(f"paths on dev1: {unseen} exists on the host but is not mounted in the container "
                           "(OCI bundle /b/verl): add a mount: ")
    assert f"scripts/build-container --mount {tmp_path / 'models' / 'gone'} 0.9.1" in line
    assert "the bundle mounts: /work, /runs" in line
    [line] = preflight.path_failures(report, {"kind": "pyxis", "image": "i.sqsh", "mounts": []})
    gone = tmp_path / "models" / "gone"
    assert f"add a mount: `{gone}:{gone}` to the runtime's mounts" in line
    [line] = preflight.path_failures(report, {"kind": "apptainer", "image": "i.sif", "mounts": []})
    assert f"add a bind: `{gone}` to the runtime's binds" in line
    [line] = preflight.path_failures(report, {"kind": "venv"})
    assert "is that filesystem mounted on every node?" in line
    assert preflight.path_failures({"dev2": {"_error": "boom"}}, oci) == ["paths on dev2: boom"]
    where = mounts.where()
    assert where["python"] and where["container"] in (None, *[where["container"]])


def test_preflight_tells_a_path_missing_on_the_host_from_an_unmounted_one(tmp_path):
    """A path the batch host lacks too is a wrong path: no mount helps; the line names the field
    that gives it (plan.json) instead of a mount (issue 35)."""
    from launcher.injob import mounts, preflight

    (tmp_path / "models").mkdir()
    wrong = str(tmp_path / "modles" / "q")  # a typo: missing on the host as well
    unmounted = str(tmp_path / "models")
    host_missing = mounts.missing_here([wrong, unmounted])
    assert host_missing == {wrong: str(tmp_path / "modles")}
    plan = {"resolved": {"actor_rollout_ref.model.path": {"value": wrong, "source": "--model"},
                         "data.train_files": {"value": [unmounted, "/d/b.parquet"], "source": "config.yaml"}},
            "entry": ["python3", "/e/main.py"]}
    # inside the container neither is there
    report = {"dev1": {wrong: {"exists": False, "readable": False}, unmounted: {"exists": False, "readable": False}}}
    oci = {"kind": "oci", "image": "/b/verl", "version": "0.9.1", "mounts": ["/work"]}
    for runtime in (oci, {"kind": "pyxis", "image": "i.sqsh"}, {"kind": "venv"}):
        first, second = preflight.path_failures(report, runtime, host_missing, plan)
        assert first == (f"paths on dev1: {wrong} does not exist on the host ({tmp_path / 'modles'} is missing "
                         "there): fix the path in --model (actor_rollout_ref.model.path)"), first
        assert "mount" not in first
        assert "does not exist on the host" not in second
    assert "exists on the host but is not mounted in the container (OCI bundle /b/verl)" in \
        preflight.path_failures(report, oci, host_missing, plan)[1]
    assert mounts.path_field("/d/b.parquet", plan) == "config.yaml (data.train_files)"
    assert mounts.path_field("/e/main.py", plan) == "the experiment's main.py (its entry)"
    assert mounts.path_field("/elsewhere", plan) == ""


class _Site:
    default_series = "s"
    series = {"s": type("Series", (), {"partition": "gpu"})()}


def test_doctor_checks_the_container_plugin_or_binary(tmp_path, monkeypatch):
    from launcher import slurm
    from launcher.submit import container_checks as cc

    image = tmp_path / "verl.sif"
    image.write_text("x")
    pyxis = Runtime(framework="verl", version="0.9.1", kind="pyxis", image=str(image))
    app = Runtime(framework="verl", version="0.9.1", kind="apptainer", image=str(image))
    asked = []

    def on_node(partition, argv, timeout=60):
        asked.append((partition, argv))
        return answers.pop(0)

    monkeypatch.setattr(slurm, "run_on_a_node", on_node)
    monkeypatch.setattr(cc, "srun_has_option", lambda option, timeout=30: False)
    [c] = cc.check("rt", pyxis, "0.9.1", _Site())
    assert c.status == "fail" and "pyxis SPANK plugin is not loaded" in c.detail and "plugstack.conf" in c.fix
    monkeypatch.setattr(cc, "srun_has_option", lambda option, timeout=30: option == "--container-image")
    answers = ["/usr/bin/enroot\n", "", "", "/usr/bin/apptainer\n"]
    [c] = cc.check("rt", pyxis, "0.9.1", _Site())
    assert c.status == "ok" and "enroot at /usr/bin/enroot" in c.detail
    [c] = cc.check("rt", pyxis, "0.9.1", _Site())
    assert c.status == "fail" and "no enroot" in c.detail
    [c] = cc.check("rt", app, "0.9.1", _Site())
    assert c.status == "fail" and "neither apptainer nor singularity" in c.detail
    [c] = cc.check("rt", app, "0.9.1", _Site())
    assert c.status == "ok" and "/usr/bin/apptainer" in c.detail
    assert all(p == "gpu" for p, _ in asked)
    [c] = cc.check("rt", Runtime(framework="verl", version="0.9.1", kind="apptainer", image="/no/such.sif"),
                   "0.9.1", _Site())
    assert c.status == "fail" and "does not exist" in c.detail


def test_doctor_checks_an_oci_bundle_and_oci_conf(tmp_path, monkeypatch):
    from launcher import slurm
    from launcher.submit import container_checks as cc

    b = bundle(tmp_path)
    rt = Runtime(framework="verl", version="0.9.1", kind="oci", image=str(b), python="/opt/sf/runtime/bin/python")
    [c] = cc.check("rt", rt, "0.9.1", _Site())
    assert c.status == "fail" and "/opt/sf/runtime/bin/python is not in" in c.detail
    sp = b / "rootfs" / "opt" / "sf" / "runtime" / "lib" / "python3.11" / "site-packages" / "verl-0.9.1.dist-info"
    sp.mkdir(parents=True)
    (b / "rootfs" / "opt" / "sf" / "runtime" / "bin").mkdir()
    (b / "rootfs" / "opt" / "sf" / "runtime" / "bin" / "python").symlink_to("/usr/bin/python3")
    assert cc.bundle_problem(str(b), rt.python, "0.9.0").endswith("has verl 0.9.1 under /opt/sf/runtime, not 0.9.0")
    conf = tmp_path / "etc" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text("")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    [c] = cc.check("rt", rt, "0.9.1", _Site())
    assert c.status == "fail" and "no " + str(conf.parent / "oci.conf") in c.detail and "silently" in c.detail
    (conf.parent / "oci.conf").write_text("RunTimeRun=...\n")
    seen = []
    monkeypatch.setattr(slurm, "run_on_a_node", lambda p, argv, timeout=60: seen.append(argv) or "0.9.1\n")
    [c] = cc.check("rt", rt, "0.9.1", _Site())
    assert c.status == "ok" and seen[0][:2] == [f"--container={b}", "/opt/sf/runtime/bin/python"]


def test_rootless_config_for_other_users(tmp_path):
    m = oci_run()
    config = {"process": {"user": {"uid": 1000, "gid": 1000}, "capabilities": {"bounding": ["CAP_KILL"]}},
              "linux": {"namespaces": [{"type": "mount"}], "resources": {"devices": [{"allow": True}]}},
              "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}, {"destination": "/tmp"}]}
    m.rootless(config, 1000, 100)
    # the host's PIDs stay visible (a driver finds its node's raylet): /proc is bound, not mounted anew
    assert [n["type"] for n in config["linux"]["namespaces"]] == ["mount", "user"]
    host_proc = {"destination": "/proc", "type": "bind", "source": "/proc", "options": ["rbind", "nosuid"]}
    assert config["mounts"] == [host_proc,
                                {"destination": "/tmp"}]
    assert config["linux"]["uidMappings"] == [{"containerID": 0, "hostID": 1000, "size": 1}]
    assert config["linux"]["gidMappings"] == [{"containerID": 0, "hostID": 100, "size": 1}]
    assert "resources" not in config["linux"] and config["process"]["user"] == {"uid": 0, "gid": 0}
    assert config["process"]["capabilities"] == {"bounding": []}
    assert m.state_dir(["runc", "--root=/run/x/alice", "run"]) == "/run/x/alice"
    assert m.own_state_dir(str(tmp_path / "state")) is None and (tmp_path / "state").is_dir()
    other = tmp_path / "other"
    other.mkdir()
    os.chown(other, 65534, 65534)
    assert "not this user's own folder" in m.own_state_dir(str(other))


def test_a_rootless_container_learns_which_paths_the_host_checked(tmp_path):
    """Inside a rootless container root's files show the overflow uid: the host side names the
    container paths it checked (the rootfs' folders above each mount, each bind mount's source
    that is root's or the user's and not open to others); an open or foreign source is left out."""
    rootfs = tmp_path / "rootfs"
    (rootfs / "var" / "lib" / "runs").mkdir(parents=True)
    (rootfs / "tmp").mkdir()
    good, open_dir = tmp_path / "good", tmp_path / "open"
    good.mkdir()
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)  # writable by all, no sticky bit: another user could swap what is in it
    config = {"root": {"path": str(rootfs)},
              "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                         {"destination": "/var/lib/runs", "type": "bind", "source": str(good)},
                         {"destination": "/tmp", "type": "bind", "source": str(open_dir)}]}
    expected = ["/", "/var", "/var/lib", "/var/lib/runs"]
    assert oci_run().host_checked_paths(config, str(tmp_path), os.getuid()) == expected
    if os.getuid() == 0:  # a source of another user is left out too
        os.chown(good, 12345, -1)
        assert oci_run().host_checked_paths(config, str(tmp_path), 4242) == ["/", "/var", "/var/lib"]


def test_inside_a_rootless_container_only_host_checked_paths_pass_as_roots(monkeypatch):
    from launcher import ownership
    monkeypatch.setattr(ownership, "_overflow_uid", lambda: 65534)
    monkeypatch.setattr(ownership, "_host_root_unmapped", lambda: True)
    monkeypatch.setenv(ownership.HOST_CHECKED_ENV, "/:/tmp")
    assert ownership.trusted_owner(65534, "/tmp") and ownership.trusted_owner(65534, "/tmp/")
    assert not ownership.trusted_owner(65534, "/tmp/other-users-folder")
    assert not ownership.trusted_owner(65534)  # no path: nothing vouches
    assert not ownership.trusted_owner(1234, "/tmp")  # another mapped user is never root
    monkeypatch.setattr(ownership, "_host_root_unmapped", lambda: False)
    assert not ownership.trusted_owner(65534, "/tmp")  # outside a user namespace the variable means nothing
