"""The supervisor's parts (launcher/injob: actuator, ending, watch, processes, record_keeper),
each alone with fakes of the parts it calls. The Slurm side of each is tested on the dev
cluster (tests/cluster/test_requeue.py, test_restart_in_place.py, test_faults.py, ...)."""
from __future__ import annotations

import ast
import dataclasses
import signal
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest

from launcher import states
from launcher.injob import actuator, heal
from launcher.injob.attempt import Attempt
from launcher.injob.ending import Ending
from launcher.injob.processes import Step, signal_steps
from launcher.injob.watch import Watch, barrier_failure

INJOB = Path(__file__).resolve().parents[2] / "launcher" / "injob"
PARTS = ["attempt", "record_keeper", "processes", "bringup", "driver_start", "watch", "actuator", "ending",
         "supervise"]


class FakeRecords:
    def __init__(self, events=()):
        self.recorded, self.reasons, self.events_ = [], [], list(events)

    def record(self, phase, **info):
        self.recorded.append((phase, info))

    def elapsed(self):
        return 1.0

    def write_reason(self, text):
        self.reasons.append(text)

    def requeued_by_trap(self, wall0):
        return False


class FakeProcs:
    def __init__(self):
        self.calls, self.steps = [], []

    def stop_nodes(self, grace_s=20):
        self.calls.append("stop_nodes")

    def terminate(self):
        self.calls.append("terminate")

    def kill_driver(self):
        self.calls.append("kill_driver")


class FakeEnding:
    def __init__(self):
        self.failed, self.requeues = [], []

    def fail(self, reason, rc=1):
        self.failed.append((reason, rc))
        return rc

    def requeue_now(self, call, failed):
        self.requeues.append(failed)
        return 0


def fake_attempt(**kw):
    pools = (SimpleNamespace(name="train", het_group=0),)
    job = SimpleNamespace(nodes=["n1", "n2", "n3"], hosts={"train": ("n1", "n2", "n3")}, head_node="n1",
                          head="n1:6379", pool_of=lambda h: pools[0] if h in ("n1", "n2", "n3") else None)
    base = dict(restart=0, contract=SimpleNamespace(max_requeues=2, requeue_lead=90), job=job, leader="7",
                job_id="7", plan=SimpleNamespace(pools=pools), ended=False, token=None, stage=states.STAGE_DRIVER,
                ray=SimpleNamespace(barrier_timeout_s=60.0))
    base.update(kw)
    return SimpleNamespace(**base)


def make_actuator(attempt=None):
    attempt = attempt or fake_attempt()
    return actuator.Actuator(attempt, FakeRecords(), FakeProcs(), bringup=None, ending=FakeEnding())


# -- the actuator --------------------------------------------------------------------------
def test_every_healing_decision_type_has_a_handler():
    """A decision heal.py may return that the actuator cannot carry out fails here, not in a job."""
    decision_types = typing.get_args(heal.Decision)
    assert decision_types and set(decision_types) == set(actuator.HANDLERS)
    for kind, name in actuator.HANDLERS.items():
        assert callable(getattr(actuator.Actuator, name, None)), f"{kind.__name__}: no Actuator.{name}"


def test_a_decision_without_a_handler_raises_instead_of_failing_the_job_silently():
    @dataclasses.dataclass(frozen=True)
    class Unknown:
        reason: str = "?"
        note: str = ""

    act = make_actuator()
    with pytest.raises(TypeError, match="no handler for the healing decision Unknown"):
        act.apply(Unknown())
    assert act.ending.failed == []


def test_give_up_fails_with_its_reason_and_code():
    act = make_actuator()
    assert act.apply(heal.GiveUp(reason="the driver failed", rc=3)) == 3
    assert act.ending.failed == [("the driver failed", 3)]


def test_requeue_without_bad_nodes_within_the_bound_names_each_node():
    act = make_actuator()
    assert act.apply(heal.RequeueWithout(nodes=("n2",), reason="health check failed")) == 0
    [(phase, info)] = act.records.recorded
    assert phase == states.REQUEUED and info["excluded"] == ["n2"] and info["restart"] == 1
    assert act.ending.requeues == ["health check failed; requeue without them failed"]


def test_requeue_without_refuses_past_the_bound_and_when_every_node_is_suspect():
    spent = make_actuator(fake_attempt(restart=2))
    assert spent.apply(heal.RequeueWithout(nodes=("n2",), reason="bad")) == 1
    assert "already requeued 2 times (max_requeues=2)" in spent.ending.failed[0][0]
    everyone = make_actuator()
    assert everyone.apply(heal.RequeueWithout(nodes=("n1", "n2", "n3"), reason="bad")) == 1
    assert "every node of the job is suspect" in everyone.ending.failed[0][0]
    assert spent.records.recorded == everyone.records.recorded == []


# -- the ending ----------------------------------------------------------------------------
def test_the_ending_is_recorded_once_then_the_steps_stop():
    attempt, records, procs = fake_attempt(), FakeRecords(), FakeProcs()
    ending = Ending(attempt, records, procs)
    assert ending.fail("barrier timed out", rc=1) == 1
    ending.finish(143, "terminated")  # a signal after the ending: nothing more recorded
    assert [p for p, _ in records.recorded] == [states.ENDED] and records.reasons == ["barrier timed out"]
    assert procs.calls == ["stop_nodes", "terminate"] and attempt.ended


def test_a_restart_past_max_requeues_is_refused_with_rc_3():
    records = FakeRecords()
    ending = Ending(fake_attempt(restart=3), records, FakeProcs())
    assert ending.check_restarts() == 3
    assert [p for p, _ in records.recorded] == [states.RESTARTED, states.ENDED]
    assert "restart 3 exceeds max_requeues=2" in records.reasons[0]
    assert Ending(fake_attempt(restart=2), FakeRecords(), FakeProcs()).check_restarts() is None


def test_an_ending_by_slurm_is_no_failure_and_a_requeue_leaves_no_reason():
    records = FakeRecords()
    ending = Ending(fake_attempt(stage=states.STAGE_BARRIER), records, FakeProcs())
    assert ending.end_by_slurm("requeued") == 0
    assert records.reasons == [] and records.recorded[0][1]["ending"] == "requeued"
    records = FakeRecords()
    assert Ending(fake_attempt(), records, FakeProcs()).end_by_slurm("time limit", signal.SIGTERM) == 143
    assert records.reasons == ["reached its time limit during phase driver"]


# -- the watch ----------------------------------------------------------------------------
def test_a_barrier_that_timed_out_names_who_never_joined():
    attempt = fake_attempt()
    text = barrier_failure({"missing": ["n3"], "pools": {"train": {"joined": ["n1", "n2"]}}}, attempt)
    assert text == ("barrier timed out after 60s during phase barrier: hosts never joined the Ray cluster: "
                    "n3 (pool train)")
    text = barrier_failure({"missing": ["n2", "n3"], "error": "GCS silent"}, attempt)
    assert "the Ray head on n1 never answered a node listing (GCS silent)" in text


def test_a_checking_steps_result_is_read_once():
    class Popen:
        stdout = None

    ending = FakeEnding()
    watch = Watch(fake_attempt(), FakeRecords(), FakeProcs(), driver=None, ending=ending, actuator=None)
    step = Step("barrier", Popen(), "barrier")
    assert watch.on_step_end(step, 3) == 1 and step.seen
    assert "barrier failed during phase barrier: exited 3 without a result" in ending.failed[0][0]
    assert watch.on_step_end(step, 3) is None and len(ending.failed) == 1


# -- the processes ---------------------------------------------------------------------------
def test_signal_steps_signals_the_live_ones_and_kills_what_is_left():
    class Popen:
        def __init__(self, rc, stays=False):
            self.rc, self.stays, self.got = rc, stays, []

        def poll(self):
            return self.rc

        def send_signal(self, signum):
            self.got.append(signum)

        def wait(self, timeout):
            if self.stays:
                import subprocess

                raise subprocess.TimeoutExpired("x", timeout)
            self.rc = 0

        def kill(self):
            self.got.append("kill")

    done, live, stuck = Popen(0), Popen(None), Popen(None, stays=True)
    signal_steps([Step("a", done, "node"), Step("b", live, "node"), Step("c", stuck, "driver")],
                 signal.SIGUSR2, grace=0, kill=True)
    assert done.got == [] and live.got == [signal.SIGUSR2] and stuck.got == [signal.SIGUSR2, "kill"]


# -- the shape of the parts -------------------------------------------------------------------
def _assigned(tree, owner: str):
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == owner:
                    yield t.attr, node.lineno


def test_each_part_declares_what_it_holds_and_sets_only_the_attempts_declared_fields():
    """Every attribute a part's method assigns is declared in its __init__; what a part sets on
    the attempt (`a.x = ...`, `self.attempt.x = ...`) is a field of Attempt; no module of
    launcher/injob assigns on a supervisor (`sup.x = ...`)."""
    fields = {f.name for f in dataclasses.fields(Attempt)}
    wrong = []
    for name in PARTS:
        path = INJOB / f"{name}.py"
        tree = ast.parse(path.read_text())
        for cls in [n for n in tree.body if isinstance(n, ast.ClassDef) and not n.decorator_list]:
            methods = [n for n in cls.body if isinstance(n, ast.FunctionDef)]
            init = next((m for m in methods if m.name == "__init__"), None)
            declared = {n for n, _ in _assigned(init, "self")} if init else set()
            wrong += [f"{name}.py:{line} self.{attr}" for m in methods for attr, line in _assigned(m, "self")
                      if attr not in declared]
        for node in ast.walk(tree):  # self.attempt.x = ...
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Attribute) \
                            and t.value.attr == "attempt" and t.attr not in fields:
                        wrong.append(f"{name}.py:{node.lineno} attempt.{t.attr}")
        wrong += [f"{name}.py:{line} a.{attr}" for attr, line in _assigned(tree, "a") if attr not in fields]
    for path in sorted(INJOB.glob("*.py")):
        tree = ast.parse(path.read_text())
        wrong += [f"{path.name}:{line} {owner}.{attr}" for owner in ("sup", "supervisor")
                  for attr, line in _assigned(tree, owner)]
    assert wrong == []


def test_steps_are_typed_and_no_part_takes_the_supervisor():
    assert dataclasses.is_dataclass(Step)
    for name in PARTS + ["capabilities"]:
        tree = ast.parse((INJOB / f"{name}.py").read_text())
        params = [a.arg for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for a in fn.args.args]
        assert "sup" not in params and "supervisor" not in params, name
