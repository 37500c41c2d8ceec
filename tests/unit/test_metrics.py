"""sf metrics / sf plot on metrics files in verl's file-logger format.

The files are written by verl's own FileLogger (verl/utils/tracking.py, class FileLogger),
loaded from the installed verl source by path so that verl/__init__ (torch) is not
imported. Without orjson (FileLogger's one dependency) the test writes the same format
by hand: tracking.py:544-545, `data = {"step": step, "data": data}` then
`orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY) + b"\\n"`.
"""
from __future__ import annotations

import importlib.util
import json
import struct
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher import runs
from launcher.cli.app import main
from launcher.monitor import metrics as m


def _verl_file_logger():
    spec = importlib.util.find_spec("verl")  # finds the package without running __init__
    if spec is None or importlib.util.find_spec("orjson") is None:
        return None
    path = Path(spec.origin).parent / "utils" / "tracking.py"
    mod_spec = importlib.util.spec_from_file_location("_verl_tracking_for_test", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module.FileLogger


def _steps(attempt: int, steps: range):
    for step in steps:
        base = {
            "critic/score/mean": 0.1 * step + attempt * 0.01,
            "val-core/openai/gsm8k/reward/mean@1": 0.05 * step,
            "timing_s/gen": 2.0 + step * 0.1,
            "timing_s/step": 5.0 + step * 0.1,
            "response_length/mean": 100.0 + step,
            "actor/pg_loss": -0.01 * step,
            "critic/vf_loss": 1.0 / step,
            "training/global_step": step,
        }
        if step % 2:
            base.pop("val-core/openai/gsm8k/reward/mean@1")
        yield step, base


def write_attempt(run_dir: Path, attempt: int, steps: range, monkeypatch) -> Path:
    """One job attempt's file, as the job writes it (VERL_FILE_LOGGER_PATH per attempt)."""
    path = run_dir / "metrics" / f"attempt-{attempt}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    FileLogger = _verl_file_logger()
    if FileLogger is not None:
        monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
        logger = FileLogger("proj", "exp")
        for step, data in _steps(attempt, steps):
            logger.log(data, step)
        logger.finish()
    else:
        with open(path, "wb") as fp:
            for step, data in _steps(attempt, steps):
                fp.write(json.dumps({"step": step, "data": data}, separators=(",", ":")).encode() + b"\n")
    return path


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.setenv("SF_RUNS_DIR", str(tmp_path / "runs"))
    r = runs.create_run(tmp_path / "runs", "my-grpo")
    write_attempt(r.dir, 0, range(1, 6), monkeypatch)
    write_attempt(r.dir, 1, range(4, 11), monkeypatch)  # requeued: resumed at step 4
    with open(r.dir / "metrics" / "attempt-1.jsonl", "ab") as fp:
        fp.write(b'{"step": 11, "data": {"critic/sc')  # torn last line of a killed job
    return r


def test_file_logger_format_is_what_we_parse(run):
    first = (run.dir / "metrics" / "attempt-0.jsonl").read_text().splitlines()[0]
    entry = json.loads(first)
    assert set(entry) == {"step", "data"} and entry["step"] == 1
    assert entry["data"]["timing_s/gen"] == pytest.approx(2.1)


def test_attempts_merge_later_wins(run):
    data = m.read_metrics(run.dir)
    assert data.skipped_lines == 1
    score = dict(data.series["critic/score/mean"])
    assert sorted(score) == list(range(1, 11))
    assert score[4] == pytest.approx(0.41)  # attempt 1 redid step 4
    assert score[3] == pytest.approx(0.30)
    assert data.steps == 10
    assert data.key_series() == ["critic/score/mean", "val-core/openai/gsm8k/reward/mean@1", "timing_s/gen",
                                 "timing_s/step", "response_length/mean", "actor/pg_loss", "critic/vf_loss"]
    summary = m.summarize(data)
    assert summary["series"]["critic/vf_loss"]["last"] == pytest.approx(0.1)
    assert 0 < summary["gen_share_of_step"] < 1


def test_cli_metrics_table_and_json(run):
    res = CliRunner().invoke(main, ["metrics", run.id])
    assert res.exit_code == 0, res.output
    assert "critic/score/mean" in res.output and "val-core/openai/gsm8k/reward/mean@1" in res.output
    assert "generation takes" in res.output
    res = CliRunner().invoke(main, ["metrics", run.id[:-2], "--json"])  # a unique prefix works
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["run"] == run.id and data["steps"] == 10
    assert data["data"]["timing_s/step"][0] == [1, pytest.approx(5.1)]
    assert "training/global_step" not in data["data"]


def test_cli_metrics_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("SF_RUNS_DIR", str(tmp_path))
    r = runs.create_run(tmp_path, "empty")
    res = CliRunner().invoke(main, ["metrics", r.id])
    assert res.exit_code == 2 and "no metrics file" in res.output
    res = CliRunner().invoke(main, ["metrics", "nope"])
    assert res.exit_code == 2 and "no run" in res.output


def _png_size(path: Path) -> tuple[int, int]:
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    assert raw[12:16] == b"IHDR"
    width, height = struct.unpack(">II", raw[16:24])
    assert zlib.crc32(raw[12:29]) == struct.unpack(">I", raw[29:33])[0]  # IHDR CRC
    return width, height


def test_cli_plot_writes_png(run, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "plots" / "run.png"
    res = CliRunner().invoke(main, ["plot", run.id, "-o", str(out)])
    assert res.exit_code == 0, res.output
    width, height = _png_size(out)
    assert width >= 400 and height >= 400
    assert out.stat().st_size > 15_000
    import matplotlib.image

    pixels = matplotlib.image.imread(str(out))
    assert pixels.std() > 0.05  # not a blank canvas
    # Lines were drawn in colour (matplotlib's default cycle), not only black text/axes.
    rgb = pixels[..., :3]
    coloured = ((rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.3).mean()
    assert coloured > 0.002


def test_plot_needs_png_suffix(run, tmp_path):
    pytest.importorskip("matplotlib")
    res = CliRunner().invoke(main, ["plot", run.id, "-o", str(tmp_path / "x.jpg")])
    assert res.exit_code == 2 and "must end in .png" in res.output


def test_distillation_loss_is_a_key_series(tmp_path, monkeypatch):
    """A distillation run logs actor/distillation/loss (the pg_loss beside it stays near 0):
    `sf metrics` shows it and `sf plot` draws it in the loss panel, without asking."""
    monkeypatch.setenv("SF_RUNS_DIR", str(tmp_path))
    r = runs.create_run(tmp_path, "my-distill")
    (r.dir / "metrics").mkdir(parents=True, exist_ok=True)
    rows = [{"step": s, "data": {"actor/pg_loss": 1e-9, "actor/distillation/loss": 0.23 - 0.01 * s}} for s in (1, 2, 3)]
    (r.dir / "metrics" / "attempt-0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    data = m.read_metrics(r.dir)
    assert "actor/distillation/loss" in data.key_series()
    assert "actor/distillation/loss" in dict(m.PANELS)["loss"]
    res = CliRunner().invoke(main, ["metrics", r.id])
    assert res.exit_code == 0 and "actor/distillation/loss" in res.output, res.output
