"""What `sf validate` shows of where values come from: each layer once, and a validation file
it fills in itself said out loud."""
from unit_helpers import sf_cli

ARGS = ("--model", "/models/m", "--train-data", "/data/train.parquet")


def _validate(*extra) -> str:
    shown = sf_cli("validate", "exp", *ARGS, *extra)
    assert shown.exit_code == 0, shown.output
    return shown.output + (shown.stderr or "")


def test_what_validate_says_without_validation_data(cli_env):
    assert sf_cli("new", "exp", "--method", "verl/grpo").exit_code == 0
    text = _validate()
    # each layer once: trainer.test_freq read "-1 [default:sf] (overrides 10 from default:sf)"
    [line] = [line for line in text.splitlines() if line.strip().startswith("trainer.test_freq = ")]
    assert line.split() == ["trainer.test_freq", "=", "-1", "[default:sf]"], line
    for line in text.splitlines():
        if "(overrides " in line:
            source = line.split("[", 1)[1].split("]", 1)[0]
            assert f"from {source})" not in line, line
    # the training file stands in for the validation files, and validate says so
    assert "data.val_files = /data/train.parquet" in text
    assert ("no validation data: data.val_files reuses the training file (verl needs one) and validation is off "
            "(test_freq=-1)") in text
    assert "validation scores it (trainer.test_freq is set)" in _validate("--set", "trainer.test_freq=5")
