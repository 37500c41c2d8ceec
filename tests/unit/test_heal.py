"""Healing's decisions (launcher/injob/heal.py), pure: a Standing and the event's evidence in,
a RestartInPlace, Requeue, RequeueWithout or GiveUp out. The supervisor carrying them out is
tested on the dev cluster (tests/cluster/test_restart_in_place.py, test_watchdog.py, test_endings.py)."""

from __future__ import annotations

from launcher.injob import heal
from launcher.injob.contract import Job, RaySettings
from launcher.injob.watchdog import Hang
from launcher.plan import Pool


def _job(**spares) -> Job:
    ray = RaySettings("loopback", "127.0.0", None, (20000, 30000), "/tmp", 60.0, 1)
    pools = (Pool("train", "fake", 2, 4, 0), Pool("teach", "fake", 1, 4, 1))
    return Job(run_dir="/r", job_id="7", leader="7", launcher="ray", config_name="ppo_trainer", pools=pools,
               hosts={"train": ("dev1", "dev2"), "teach": ("dev7",)},
               spares={"train": tuple(spares.get("train", ())), "teach": tuple(spares.get("teach", ()))},
               head_node="dev1", head="127.0.0.11:20000", ray=ray, checkpoint_dir="/r/c")


def _standing(job=None, *, in_place=0, bound=2, restart=0, max_requeues=2, stage="driver", **kw) -> heal.Standing:
    values = dict(job=job or _job(), stage=stage, preflight=False, launcher="ray", restarts_in_place=in_place,
                  max_restarts_in_place=bound, head_slot_redraws=0, restart=restart,
                  may_requeue=restart < max_requeues,
                  max_requeues=max_requeues, requeue_lead=330)
    values.update(kw)
    return heal.Standing(**values)


def test_a_frozen_node_with_a_spare_left_is_swapped_for_it():
    st = _standing(_job(train=("dev3",)))
    decision = heal.after_hang(st, "hang: no training step", ["dev2"])
    assert isinstance(decision, heal.RestartInPlace)
    assert decision.cause == "hang" and decision.number == 1 and decision.bound == 2
    assert decision.nodes == ("dev2",) and decision.swapped == {"dev2": "dev3"}
    assert decision.hosts == {"train": ("dev1", "dev3"), "teach": ("dev7",)}
    assert decision.spares == {"train": (), "teach": ()}
    assert st.job.hosts["train"] == ("dev1", "dev2")  # the Standing is not changed
    # a node that went away (no node_exit) takes the spare the same way
    gone = heal.after_node_death(st, "Ray node dev2 ended", ["dev2"], lost=True)
    assert isinstance(gone, heal.RestartInPlace) and gone.swapped == {"dev2": "dev3"} and gone.cause == "node"
    assert "its wrapper recorded no exit" in gone.reason


def test_a_frozen_node_without_a_spare_requeues_without_it_then_stops_at_the_bound():
    decision = heal.after_hang(_standing(), "hang: no training step", ["dev2"])
    assert decision == heal.RequeueWithout(("dev2",), "hang: no training step",
                                           note="not restarting in place: dev2 did not answer and no spare "
                                                "can take its place")
    at_bound = heal.after_hang(_standing(restart=2), "hang: no training step", ["dev2"])
    assert isinstance(at_bound, heal.GiveUp) and at_bound.rc == 1
    assert at_bound.reason == "hang: no training step; not requeued: already requeued 2 times (max_requeues=2)"
    # two silent nodes, one spare: no restart in place either
    two = heal.after_hang(_standing(_job(train=("dev3",))), "hang", ["dev2", "dev7"])
    assert isinstance(two, heal.RequeueWithout) and two.nodes == ("dev2", "dev7") and "their place" in two.note
    # the head is never swapped out
    head = heal.after_hang(_standing(_job(train=("dev3",))), "hang", ["dev1"])
    assert isinstance(head, heal.RequeueWithout)


def test_a_node_gone_without_a_spare_is_requeued_then_fails_at_the_bound():
    decision = heal.after_node_death(_standing(), "Ray node dev2 ended", ["dev2"], lost=True)
    assert isinstance(decision, heal.Requeue) and decision.cause == "node" and decision.nodes == ("dev2",)
    assert decision.note.startswith("not restarting in place: dev2 went away")
    at_bound = heal.after_node_death(_standing(restart=1, max_requeues=1), "Ray node dev2 ended", ["dev2"], lost=True)
    assert isinstance(at_bound, heal.GiveUp)
    assert "not requeued: already requeued 1 times (max_requeues=1)" in at_bound.reason
    # Ray died on a live node (its wrapper said so) and no restart in place is allowed: it fails
    ray_died = heal.after_node_death(_standing(bound=0), "Ray node dev2 ended", ["dev2"], lost=False)
    assert ray_died == heal.GiveUp("Ray node dev2 ended")
    # before the driver runs, a lost node fails the job (a broken setup repeats on every requeue)
    early = heal.after_node_death(_standing(stage="barrier"), "Ray node dev2 ended", ["dev2"], lost=True)
    assert early == heal.GiveUp("Ray node dev2 ended")


def test_when_every_node_answered_the_restart_keeps_the_same_nodes():
    job = _job(train=("dev3",))
    decision = heal.after_hang(_standing(job), "hang: no training step", [])
    assert isinstance(decision, heal.RestartInPlace) and decision.nodes is None and decision.swapped == {}
    assert decision.hosts == job.hosts and decision.spares == job.spares  # the spare stays a spare
    driver = heal.after_driver_failure(_standing(job, in_place=1), "driver exited with 1", training_steps=3)
    assert isinstance(driver, heal.RestartInPlace) and driver.number == 2 and driver.hosts == job.hosts
    # Ray died on a live node and its pool has no spare: Ray again on the same nodes
    ray_died = heal.after_node_death(_standing(), "Ray node dev2 ended", ["dev2"], lost=False)
    assert isinstance(ray_died, heal.RestartInPlace) and ray_died.nodes == ("dev2",) and ray_died.swapped == {}
    assert ray_died.hosts == _job().hosts


def test_the_restart_bound_ends_restarts_in_place():
    note = "not restarting in place: 2 restarts in place already (max_restarts_in_place=2)"
    driver = heal.after_driver_failure(_standing(in_place=2), "driver exited with 1", training_steps=5)
    assert driver == heal.GiveUp("driver exited with 1; after 2 restarts in place (max_restarts_in_place=2)",
                                 note=note)
    hang = heal.after_hang(_standing(in_place=2), "hang", [])
    assert hang == heal.Requeue("hang", "hang", None, note=note)
    past_both = heal.after_hang(_standing(in_place=2, restart=2), "hang", [])
    assert isinstance(past_both, heal.GiveUp) and past_both.reason == (
        "hang; after 2 restarts in place (max_restarts_in_place=2); not requeued: already requeued 2 times "
        "(max_requeues=2)")
    # bound 0 (the default): no restart in place and no note
    assert heal.after_driver_failure(_standing(bound=0), "driver exited with 1", 5) == \
        heal.GiveUp("driver exited with 1")


def test_no_restart_in_place_for_a_driver_that_never_trained_a_preflight_or_torchrun():
    never = heal.after_driver_failure(_standing(), "driver exited with 1", training_steps=0)
    assert never == heal.GiveUp("driver exited with 1",
                                note="not restarting in place: the driver failed before its first training step")
    assert isinstance(heal.after_driver_failure(_standing(), "x", training_steps=None), heal.RestartInPlace)
    assert isinstance(heal.after_driver_failure(_standing(preflight=True), "x", 4), heal.GiveUp)
    assert isinstance(heal.after_driver_failure(_standing(launcher="torchrun"), "x", 4), heal.GiveUp)


def test_a_failed_attempt_says_how_often_it_restarted_in_place():
    assert heal.after(0, 2) == ""
    assert heal.after(1, 2) == "; after 1 restart in place (max_restarts_in_place=2)"
    assert heal.after(2, 2) == "; after 2 restarts in place (max_restarts_in_place=2)"


def test_a_hangs_reason_names_the_stacks_and_the_silent_nodes():
    hang = Hang(idle_s=61.2, limit_s=60, last_step=4, first_step=False)
    assert heal.hang_reason(hang, "stacks/7-0", {"dev2": "stopped"}) == (
        "hang: no training step for 61 s after step 4 (limit 60 s); Python stacks of every node in "
        "stacks/7-0/ (sf logs RUN --stacks); did not answer: dev2 (stopped)")


def test_the_watchdog_is_off_without_step_records_or_a_limit(tmp_path):
    from launcher.injob.contract import HealSettings

    path = str(tmp_path / "attempt-0.jsonl")
    dog, line = heal.new_watchdog(HealSettings(hang_timeout_s=0), ["trainer.logger=[file]"], path, 0.0)
    assert dog is None and line == "watchdog: off (hang_timeout_s is 0)"
    dog, line = heal.new_watchdog(HealSettings(), ["trainer.logger=[console]"], path, 0.0)
    assert dog is None and "trainer.logger has no `file`" in line
    dog, line = heal.new_watchdog(HealSettings(hang_timeout_s=90), ["trainer.logger=[file]"], path, 0.0)
    assert dog is not None and dog.limits.hang_timeout_s == 90 and line.startswith(f"watchdog: following {path}")


def test_spares_take_a_dead_nodes_slot_and_never_the_heads():
    job = _job(train=("dev3",))
    assert heal.spares_cover(job, ["dev2"]) and not heal.spares_cover(job, ["dev7"])  # teach has none
    assert not heal.spares_cover(job, ["dev1"]) and not heal.spares_cover(job, ["dev2", "dev3"])
    hosts, spares, swapped = heal.swap_in_spares(job, ["dev2", "dev7"])
    assert hosts == {"train": ("dev1", "dev3"), "teach": ("dev7",)} and spares["train"] == ()
    assert swapped == {"dev2": "dev3"} and job.hosts["train"] == ("dev1", "dev2")  # pure


def test_a_restart_resumes_from_verls_tracked_step(tmp_path):
    from launcher.checkpoints import tracked_step

    assert (tracked_step(str(tmp_path)) or 0) == 0  # no checkpoint yet: verl starts at step 0
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("40\n")
    assert tracked_step(str(tmp_path)) == 40


def test_a_head_whose_slot_was_taken_before_ray_ran_draws_another_slot_twice_at_most():
    reason = "Ray node dev1 (pool train) ended during phase bringup: port collision"
    first = heal.after_node_death(_standing(stage="bringup", bound=0), reason, ["dev1"], lost=False,
                                  head_slot_taken=True)
    assert isinstance(first, heal.RedrawHeadSlot) and first.number == 1 and "1 of at most 2" in first.note
    # not a restart in place: it does not need (or spend) max_restarts_in_place, and a preflight gets it too
    again = heal.after_node_death(_standing(stage="barrier", bound=0, preflight=True, head_slot_redraws=1), reason,
                                  ["dev1"], lost=False, head_slot_taken=True)
    assert isinstance(again, heal.RedrawHeadSlot) and again.number == 2
    spent = heal.after_node_death(_standing(stage="barrier", head_slot_redraws=2), reason, ["dev1"], lost=False,
                                  head_slot_taken=True)
    assert isinstance(spent, heal.GiveUp) and "drawn again 2 times and taken each time" in spent.reason
    # once the driver runs, Ray ran: a head that ends then follows the usual rules
    later = heal.after_node_death(_standing(stage="driver"), reason, ["dev1"], lost=False, head_slot_taken=True)
    assert not isinstance(later, heal.RedrawHeadSlot)
    other = heal.after_node_death(_standing(stage="bringup"), reason, ["dev1"], lost=False)
    assert isinstance(other, heal.GiveUp)
