"""The site file: bad values are one-line errors naming the field; profiles."""
from __future__ import annotations

import pytest
import yaml

from launcher.errors import SpecError
from launcher.spec import paths
from launcher.spec.site import parse_profile, site_from_dict


def dev() -> dict:
    return yaml.safe_load((paths.site_dir() / "dev.yaml").read_text())


@pytest.mark.parametrize("edit,field", [
    (lambda d: d["series"]["fake"].update(gpus_per_node="four"), "site.series.fake.gpus_per_node"),
    (lambda d: d["series"]["fake"].update(cpus_per_node=-1), "site.series.fake.cpus_per_node"),
    (lambda d: d["series"]["fake"].update(colour="red"), "site.series.fake"),
    (lambda d: d["series"].update(bad="not a mapping"), "site.series.bad"),
    (lambda d: d["slurm"].update(max_requeues="lots"), "site.slurm.max_requeues"),
    (lambda d: d["slurm"].update(signal_lead_s=True), "site.slurm.signal_lead_s"),
    (lambda d: d["slurm"].update(hang_timeout_s=-1), "site.slurm.hang_timeout_s"),
    (lambda d: d["slurm"].update(first_step_timeout_s="1h"), "site.slurm.first_step_timeout_s"),
    (lambda d: d["slurm"].update(first_step_timeout_s=0), "site.slurm.first_step_timeout_s"),
    (lambda d: d["ray"].update(barrier_timeout_s="soon"), "site.ray.barrier_timeout_s"),
    (lambda d: d["ray"].update(port_range=[30000, 20000]), "site.ray.port_range"),
    (lambda d: d["ray"].update(port_range="20000-30000"), "site.ray.port_range"),
])
def test_bad_site_values_name_the_field(edit, field):
    data = dev()
    edit(data)
    with pytest.raises(SpecError) as err:
        site_from_dict(data, "site.yaml")
    assert err.value.field == field


def test_the_dev_site_loads():
    site = site_from_dict(dev(), "dev.yaml")
    assert site.series["fake"].gpus_per_node == 4 and site.ray.address_method == "loopback"


@pytest.mark.parametrize("text,want", [
    ("fake:4", ("fake", 1, 4)), ("fake:8", ("fake", 2, 4)), ("fake:2", ("fake", 1, 2)),
    ("fake:3x4", ("fake", 3, 4)), ("fake-teach:1x2", ("fake-teach", 1, 2)),
])
def test_profiles(text, want):
    assert parse_profile(text, site_from_dict(dev())) == want


@pytest.mark.parametrize("text", ["fake:6", "fake:1x8", "h100:8", "fake", "fake:0", "fake:4\n", "fake:2x0"])
def test_bad_profiles(text):
    with pytest.raises(SpecError) as err:
        parse_profile(text, site_from_dict(dev()))
    assert err.value.field == "--profile"


def test_health_check_setting():
    import pytest

    from launcher.errors import SpecError
    from launcher.spec.site import site_from_dict

    base = {"name": "s", "runs_dir": "/r", "series": {}}
    assert site_from_dict(base).ray.health_check == "preflight"
    assert site_from_dict({**base, "ray": {"health_check": "always"}}).ray.health_check == "always"
    with pytest.raises(SpecError) as err:
        site_from_dict({**base, "ray": {"health_check": "sometimes"}})
    assert err.value.field == "site.ray.health_check"
