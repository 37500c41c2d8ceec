"""Issue 33: no input and no damaged file breaks sf. Each bad input goes through the real CLI
(click's CliRunner) and must end with exit 2 and one `sf: error:` line naming the option or
file and the fix; with --json, errors are one `{"ok": false, ...}` document, never a traceback."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent / "compiler_fixtures"))
from sfc_helpers import write_site  # noqa: E402

from launcher.cli import app  # noqa: E402
from launcher.cli.app import COMMANDS, main  # noqa: E402

GOOD = """method: verl/grpo
model: Qwen/Qwen2.5-0.5B-Instruct
data:
  train: {files: /d/train.parquet}
  validation: {files: /d/test.parquet}
"""


@pytest.fixture
def env(tmp_path, monkeypatch):
    site = write_site(tmp_path, runs_dir=str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SF_SITE", str(site))
    monkeypatch.setenv("SF_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SF_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "runs").mkdir()
    return tmp_path


def sf(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def refused(result, *needles, code=2):
    """Exit `code`, one `sf: error:` line holding every needle, no traceback."""
    assert result.exit_code == code, (result.exit_code, result.output, result.stderr, result.exception)
    lines = [line for line in result.stderr.splitlines() if line.startswith("sf: error: ")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.output
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


def json_refused(result, *needles, code=2):
    """--json: the error document on stdout (and the one line on stderr)."""
    line = refused(result, *needles, code=code)
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["errors"], doc
    text = json.dumps(doc)
    for needle in needles:
        assert needle in text, (needle, doc)
    return line, doc


# --- 1. an unexpected exception: one line and a saved report, JSON with --json ------------

def _args_for(name: str) -> list[str]:
    """The least each command needs to get past click's parsing into its body."""
    command = app.LazyGroup().get_command(None, name)
    args: list[str] = []
    for param in command.params:
        if not param.required:
            continue
        if isinstance(param, click.Argument):
            args.append("x")
        else:
            args += [param.opts[0], "x"]
    return args


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_crash_in_any_command_is_one_line_and_a_report(env, monkeypatch, name):
    def boom(self, ctx):
        raise ZeroDivisionError("boom in " + self.name)

    monkeypatch.setattr(click.Command, "invoke", boom)
    line = refused(sf(name, *_args_for(name)), "ZeroDivisionError", "boom in", "report saved in", code=1)
    report = Path(line.split("report saved in ", 1)[1].split(";")[0])
    assert report.is_file() and report.parent == env / "cache" / "crashes", report
    text = report.read_text()
    assert "Traceback" in text and "ZeroDivisionError: boom in" in text and "command:" in text


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_crash_with_json_is_an_error_document(env, monkeypatch, name):
    monkeypatch.setattr(click.Command, "invoke", lambda self, ctx: {}["missing"])
    line, doc = json_refused(sf(name, *_args_for(name), "--json"), "KeyError", code=1)
    assert doc["errors"][0]["field"] == "internal"


def test_crash_report_unwritable_still_one_line(env, monkeypatch):
    (env / "cache").write_text("a file where the cache folder should be")
    monkeypatch.setattr(click.Command, "invoke", lambda self, ctx: 1 / 0)
    refused(sf("list"), "ZeroDivisionError", "no report", code=1)
