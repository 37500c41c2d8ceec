"""Hydra grammar errors name the key the user wrote and say how to quote (issue 13 item 4)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from launcher.cli.app import main
from launcher.verlcheck import grammar_errors


@pytest.mark.parametrize("text,key,value", [
    ("trainer.project_name=a b;c", "trainer.project_name", "a b;c"),
    ("trainer.experiment_name=x)", "trainer.experiment_name", "x)"),
    ("+trainer.tag=a'b", "trainer.tag", "a'b"),
])
def test_each_bad_value_is_named_with_its_quoted_form(text, key, value):
    (err,) = grammar_errors([text, "trainer.total_epochs=3"])
    assert err.field == key and repr(value) in str(err) and "quote it: --set '" in str(err)


def test_quoted_values_and_plain_ones_pass():
    assert grammar_errors(['trainer.project_name="a b;c"', "trainer.logger=[console,file]", "a.b=1e-6"]) == []


def test_cli_exit_2_and_the_suggested_quoting_works():
    bad = CliRunner().invoke(main, ["validate", "examples/grpo", "--set", "trainer.project_name=a b;c"])
    assert bad.exit_code == 2 and "trainer.project_name: value 'a b;c'" in bad.output
    good = CliRunner().invoke(main, ["validate", "examples/grpo", "--set", 'trainer.project_name="a b;c"'])
    assert good.exit_code == 0, good.output
