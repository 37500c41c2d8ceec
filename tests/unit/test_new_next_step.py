"""`sf new`'s `next:` line, followed as a newcomer would (placeholders filled in), validates for
every method of the catalog: the distillation one left out the teacher and failed."""
import json
import re

import pytest
import yaml
from unit_helpers import sf_cli

from launcher.compile.catalog import all_methods

FILLED = {"PATH_OR_HF_ID": "/models/m", "FILE": "/data/train.parquet"}


@pytest.mark.parametrize("method", all_methods())
def test_the_next_step_of_sf_new_validates(cli_env, method):
    created = sf_cli("new", "exp", "--method", f"verl/{method}", "--json")
    assert created.exit_code == 0, created.output
    step = json.loads(created.output)["next"]
    command = step
    teacher = re.fullmatch(r"set teacher: \{model: PATH_OR_HF_ID\} in (\S+), then (.*)", step)
    if teacher:  # the one step before the command: the teacher, in config.yaml
        config = cli_env / teacher.group(1)
        data = yaml.safe_load(config.read_text())
        config.write_text(yaml.safe_dump({**data, "teacher": {"model": "/models/teacher"}}))
        command = teacher.group(2)
    words = [FILLED.get(word, word) for word in command.split()]
    assert words[:2] == ["sf", "validate"], step
    checked = sf_cli(*words[1:])
    assert checked.exit_code == 0, (step, checked.output)
