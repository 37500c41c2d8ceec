"""Runtime resolution: registry, FORGE_IMAGE_VERL, kinds, and the missing-runtime error."""
from __future__ import annotations

import pytest

from launcher.errors import SpecError
from launcher.spec.runtimes import resolve_runtime
from launcher.spec.site import site_from_dict


def site(registry=None):
    return site_from_dict({"name": "s", "runs_dir": "/r", "series": {}, "runtime_registry": registry})


def write(tmp_path, text):
    path = tmp_path / "runtimes.yaml"
    path.write_text(text)
    return str(path)


REG = """verl:
  "0.9.1": {kind: venv, path: /opt/rt/verl-0.9.1}
  "0.9.0": {kind: module, modules: [cuda/12, verl/0.9.0]}
  "0.8.5": {kind: pyxis, image: /img/verl.sqsh, mounts: ["/data:/data"]}
  "0.8.4": {kind: apptainer, image: /img/verl.sif, binds: [/data]}
"""


def test_registry_kinds(tmp_path):
    s = site(write(tmp_path, REG))
    rt = resolve_runtime("verl", "0.9.1", s, environ={})
    assert rt.kind == "venv" and rt.activate_lines() == ["source /opt/rt/verl-0.9.1/bin/activate"]
    assert rt.runtime_python() == "/opt/rt/verl-0.9.1/bin/python"
    rt = resolve_runtime("verl", "0.9.0", s, environ={})
    assert rt.kind == "module" and rt.activate_lines() == ["module load cuda/12 verl/0.9.0"]
    rt = resolve_runtime("verl", "0.8.5", s, environ={})
    assert rt.srun_flags() == ["--container-image=/img/verl.sqsh", "--container-mounts=/data:/data"]
    assert rt.local_argv(["python3"]) is None
    rt = resolve_runtime("verl", "0.8.4", s, environ={})
    assert rt.wrap(["python3", "-V"])[:5] == ["apptainer", "exec", "--nv", "--bind", "/data"]


def test_env_registry_file_overrides_site(tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text('verl:\n  "0.9.1": {kind: venv, path: /elsewhere}\n')
    rt = resolve_runtime("verl", "0.9.1", site(write(tmp_path, REG)), environ={"FORGE_RUNTIME_REGISTRY_FILE": str(other)})
    assert rt.path == "/elsewhere"


def test_forge_image_names_one_runtime_for_every_version(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("")
    assert resolve_runtime("verl", "0.7.0", site(), environ={"FORGE_IMAGE_VERL": str(venv)}).kind == "venv"
    assert resolve_runtime("verl", "0.7.0", site(), environ={"FORGE_IMAGE_VERL": "/img/x.sif"}).kind == "apptainer"
    assert resolve_runtime("verl", "0.7.0", site(), environ={"FORGE_IMAGE_VERL": "nvcr.io#verl:0.9"}).kind == "pyxis"


def test_missing_version_names_runtime_and_how_to_publish(tmp_path):
    reg = write(tmp_path, REG)
    with pytest.raises(SpecError) as err:
        resolve_runtime("verl", "0.7.0", site(reg), environ={})
    msg = str(err.value)
    assert "verl 0.7.0" in msg and "admin" in msg and reg in msg and "FORGE_IMAGE_VERL" in msg
    assert "0.9.1" in msg  # what is published
    assert "method" not in msg
    assert err.value.exit_code == 2


def test_no_registry_or_missing_file(tmp_path):
    with pytest.raises(SpecError, match="verl 0.9.1"):
        resolve_runtime("verl", "0.9.1", site(None), environ={})
    with pytest.raises(SpecError, match="does not exist"):
        resolve_runtime("verl", "0.9.1", site(str(tmp_path / "nope.yaml")), environ={})


def test_bad_entries_refused(tmp_path):
    for text in ['verl:\n  "0.9.1": {kind: docker, image: x}\n', 'verl:\n  "0.9.1": {kind: module}\n',
                 'verl:\n  "0.9.1": {kind: venv, path: "/a b"}\n']:
        with pytest.raises(SpecError):
            resolve_runtime("verl", "0.9.1", site(write(tmp_path, text)), environ={})


@pytest.mark.parametrize("entry,key", [
    ({"kind": "venv", "path": "/rt", "python": "/usr/bin/python3"}, "python"),  # a venv's is path/bin/python
    ({"kind": "pyxis", "image": "/img/v.sqsh", "binds": ["/data"]}, "binds"),  # apptainer's word
    ({"kind": "apptainer", "image": "/img/v.sif", "mounts": ["/data:/data"]}, "mounts"),  # pyxis' word
    ({"kind": "module", "modules": ["verl"], "image": "/img/v.sif"}, "image"),
])
def test_a_key_the_entrys_kind_does_not_read_is_refused(entry, key):
    from launcher.spec.runtimes import runtime_from_entry

    with pytest.raises(SpecError) as err:
        runtime_from_entry("verl", "0.9.1", entry, "reg.yaml")
    assert err.value.field == f"runtime.{key}"
    assert f"a {entry['kind']} runtime does not read {key} (it reads " in err.value.message
