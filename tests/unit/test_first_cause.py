"""failure_text.first_cause: a failed driver's reason is the first exception of its last chain."""
from __future__ import annotations

from launcher.injob.failure_text import first_cause

VERL_CRITIC = """\
(TaskRunner pid=4242) Traceback (most recent call last):
(TaskRunner pid=4242)   File "/verl/utils/model.py", line 600, in load_valuehead_model
(TaskRunner pid=4242)     model = AutoModelForTokenClassification.from_pretrained(
(TaskRunner pid=4242)             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
(TaskRunner pid=4242) ImportError: FlashAttention2 has been toggled on, but it cannot be used: flash_attn missing
(TaskRunner pid=4242)
(TaskRunner pid=4242) During handling of the above exception, another exception occurred:
(TaskRunner pid=4242)
(TaskRunner pid=4242) Traceback (most recent call last):
(TaskRunner pid=4242)   File "/verl/utils/model.py", line 610, in load_valuehead_model
(TaskRunner pid=4242)     raise ValueError("is not a value head model, please install trl") from None
(TaskRunner pid=4242) ValueError: /models/Qwen is not a value head model, please install trl
"""


def test_the_first_exception_of_a_chain_comes_first():
    cause = first_cause(VERL_CRITIC.splitlines())
    assert cause.startswith("ImportError: FlashAttention2 has been toggled on"), cause
    assert "(then: ValueError: /models/Qwen is not a value head model" in cause


def test_direct_cause_chain_and_only_the_last_chain():
    log = """\
Traceback (most recent call last):
  File "a.py", line 1, in <module>
KeyError: 'old failure, handled and logged'
step 3 ok
Traceback (most recent call last):
  File "b.py", line 2, in load
FileNotFoundError: [Errno 2] No such file or directory: '/data/train.parquet'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "main.py", line 9, in <module>
RuntimeError: dataset could not be loaded
"""
    cause = first_cause(log.splitlines())
    assert cause == ("FileNotFoundError: [Errno 2] No such file or directory: '/data/train.parquet' "
                     "(then: RuntimeError: dataset could not be loaded)")


def test_a_single_traceback_and_no_traceback():
    assert first_cause(["Traceback (most recent call last):", "ValueError: reward function returned None"]) == \
        "ValueError: reward function returned None"
    assert first_cause(["loading", "ValueError: bad value", "exiting"]) == "ValueError: bad value"
    assert first_cause(["all fine", "exit 1"]) is None


def test_a_bare_exception_name():
    assert first_cause(["Traceback (most recent call last):", '  File "x.py", line 1', "KeyboardInterrupt"]) == \
        "KeyboardInterrupt"


def test_ray_colours_are_not_in_the_reason():
    # seen on the H200 when verl's training worker was killed (benchmarks/gpu/RESULTS.md, part 6)
    log = ["Traceback (most recent call last):", '  File "main_ppo.py", line 1, in run',
           "ray.exceptions.RayTaskError(ActorDiedError): \x1b[36mray::TaskRunnerV1.run()\x1b[39m (pid=7966)"]
    assert first_cause(log) == "ray.exceptions.RayTaskError(ActorDiedError): ray::TaskRunnerV1.run() (pid=7966)"


# verl 0.9.1's one-step-off trainer on the H200 (2026-12-02), abridged: Ray prints the remote
# tasks' tracebacks inside the driver's one block, a header per task hop, the original last.
RAY_NESTED = """\
Error executing job with overrides: ['algorithm.adv_estimator=grpo']
Traceback (most recent call last):
  File "/tmp/site/verl/experimental/one_step_off_policy/main_ppo.py", line 124, in main
    run_ppo(config, task_runner_class=OneStepTaskRunner)
  File "/tmp/site/ray/_private/worker.py", line 1053, in get_objects
    raise value.as_instanceof_cause()
ray.exceptions.RayTaskError(ImportError): \x1b[36mray::OneStepTaskRunner.run()\x1b[39m (pid=10385, ip=127.0.0.11)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/tmp/site/verl/experimental/one_step_off_policy/main_ppo.py", line 104, in run
    trainer.init_workers()
ray.exceptions.RayTaskError(ImportError): \x1b[36mray::WorkerDict.ref_init_model()\x1b[39m (pid=10748, ip=127.0.0.11)
  File "/opt/torch/.venv/lib/python3.12/site-packages/transformers/modeling_utils.py", line 1562, in _fa_err
    raise ImportError(
ImportError: FlashAttention2 has been toggled on, but it cannot be used: the package seems not installed.

Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.
"""


def test_a_ray_task_error_names_the_original_exception_and_the_task_that_raised_it():
    cause = first_cause(RAY_NESTED.splitlines())
    assert cause == ("ImportError: FlashAttention2 has been toggled on, but it cannot be used: the package seems "
                     "not installed. (in ray::WorkerDict.ref_init_model())"), cause


def test_a_ray_task_error_without_the_original_keeps_its_header():
    lines = ["Traceback (most recent call last):", '  File "w.py", line 1, in get',
             "ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=1, ip=127.0.0.1)",
             "[sf 10:00:00] phase ended rc=1"]
    assert first_cause(lines) == "ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=1, ip=127.0.0.1)"


def test_a_supervisor_line_is_one_write(monkeypatch):
    """The driver shares the batch log: a supervisor line written in two parts (text, then its
    newline, as print() does unbuffered) let the driver's error land in the middle of it, and
    first_cause then found no error line (seen in CI). The node wrapper's lines too."""
    import sys

    from launcher.injob import record_keeper

    class Recorder:
        def __init__(self):
            self.writes = []

        def write(self, text):
            self.writes.append(text)
            return len(text)

        def flush(self):
            pass

    out = Recorder()
    monkeypatch.setattr(sys, "stdout", out)
    record_keeper.log("watchdog: following metrics/attempt-0.jsonl")
    [line] = out.writes
    assert line.startswith("[sf ") and line.endswith("watchdog: following metrics/attempt-0.jsonl\n")
    # the node wrapper's lines share its node log with `ray start`'s processes: the same writer
    from launcher.injob import node
    from launcher.injob.node_logs import write_line

    assert node.write_line is write_line
    err = Recorder()
    monkeypatch.setattr(sys, "stderr", err)
    write_line("[sf node dev1] ray start exited with 1")
    write_line("[sf node dev1] cannot keep Ray's logs", err=True)
    assert out.writes[1:] == ["[sf node dev1] ray start exited with 1\n"]
    assert err.writes == ["[sf node dev1] cannot keep Ray's logs\n"]
