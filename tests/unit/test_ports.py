"""Port blocks per (job, node slot), temp dir length, node addresses, resource names."""
from __future__ import annotations

import pytest
from unit_helpers import job_json

from launcher import ray_facts
from launcher.injob import address, ports, topology


def test_a_nodes_ports_are_one_span_and_the_dashboard_is_found_from_the_gcs_port():
    p = ports.span_ports(20000)
    assert p.fixed() == list(range(20000, 20000 + ports.SPAN)) and p.all_ports() == p.fixed()
    assert (p.min_worker, p.max_worker, p.last) == (0, 0, 20000 + ports.SPAN - 1)  # workers: the kernel's ports
    assert ray_facts.dashboard_port(p.gcs) == p.dashboard  # what `sf dashboard` forwards


def test_the_baselines_blocks_never_overlap_and_a_small_range_is_refused():
    rng = (20000, 59999)
    seen = {}
    for job in (62, 63):
        for slot in range(ports.SLOTS_PER_JOB):
            for port in ports.node_ports(job, slot, rng).all_ports():
                assert rng[0] <= port <= rng[1] and port not in seen, (port, job, slot)
                seen[port] = (job, slot)
    with pytest.raises(ValueError, match="widen"):
        ports.random_base((30000, 30100))


def test_free_spans_skip_taken_ports_and_wrap_to_the_ranges_low_end():
    rng = (20000, 21023)
    taken = {20005, 21020}
    spans = ports.free_spans(20000, rng, taken.__contains__)
    assert next(spans) == 20006 and next(spans) == 20007
    last = rng[1] - ports.SPAN + 1
    assert list(ports.free_spans(last, rng, taken.__contains__))[:2] == [20006, 20007]  # 21020 in the last span
    assert all(not taken & set(range(b, b + ports.SPAN)) for b in ports.free_spans(20010, rng, taken.__contains__))


def test_one_socket_in_each_old_slot_blocks_nothing_and_the_whole_range_must_be_taken_to_block():
    """The attack of issue 44.4: one socket of another user in each 128-port slot of the range
    (8 per 1024 ports, 96 in the dev site's range) blocked every job of the host. Now only a
    socket in every SPAN ports of the range does, and the search then ends, each port looked at
    a bounded number of times."""
    rng = (20000, 21023)
    kinds = (0, 1, 4, 10, 100)  # a GCS, a raylet, an agent, a metrics, a worker port of each old slot
    old_slots = {rng[0] + s * 128 + kinds[s % len(kinds)] for s in range(8)}
    assert next(ports.free_spans(rng[0], rng, old_slots.__contains__), None) is not None
    every_span = set(range(rng[0], rng[1] + 1, ports.SPAN))
    looked = []

    def busy(port):
        looked.append(port)
        return port in every_span

    assert next(ports.free_spans(ports.random_base(rng), rng, busy), None) is None
    assert len(looked) <= 2 * (rng[1] - rng[0] + 1)
    one_more_gap = set(range(rng[0], rng[1] + 1, ports.SPAN + 1))
    assert next(ports.free_spans(rng[0], rng, one_more_gap.__contains__), None) is not None


def test_the_heads_start_is_random_over_the_whole_range_and_a_jobs_nodes_start_apart():
    rng = (20000, 32767)
    draws = [ports.random_base(rng) for _ in range(400)]
    assert all(rng[0] <= d <= rng[1] - ports.SPAN + 1 for d in draws) and len(set(draws)) > 350
    assert max(draws) - min(draws) > (rng[1] - rng[0]) // 2
    head = rng[1] - 20  # near the top: the nodes after it wrap to the low end
    starts = [ports.worker_start(head, slot, rng) for slot in range(16)]
    assert starts[0] == head and all(rng[0] <= s <= rng[1] - ports.SPAN + 1 for s in starts)
    spans = [set(range(s, s + ports.SPAN)) for s in starts]
    assert all(not spans[i] & spans[j] for i in range(16) for j in range(i))


def test_temp_dir_short_and_checked():
    path = ports.temp_dir("/tmp", 123456789, "dev12")
    assert path == "/tmp/sf123456789_dev12"
    assert len(path) + ports.RAY_SOCKET_SUFFIX <= ports.UNIX_PATH_MAX
    assert ports.temp_dir("/tmp", 1, "node/with weird") == "/tmp/sf1_node_with_weird"
    with pytest.raises(ValueError, match="107"):
        ports.temp_dir("/scratch/" + "x" * 60, 1, "dev1")


def test_loopback_address_by_node_name():
    assert address.node_address("dev1", "loopback", "127.0.0") == "127.0.0.11"
    assert address.node_address("dev8", "loopback", "127.0.0") == "127.0.0.18"
    with pytest.raises(ValueError):
        address.node_address("login", "loopback")
    with pytest.raises(ValueError):
        address.node_address("dev1", "carrier-pigeon")
    with pytest.raises(ValueError):
        address.node_address("dev1", "interface", interface=None)


def test_resource_names_never_contain_group():
    assert topology.pool_resource("train") == "sf_pool_train"
    assert "_group_" not in topology.pool_resource("my_group_1")
    assert "_group_" not in topology.node_resource("rack-group-3")
    assert topology.node_resource("dev1") == "sf_node_dev1"


def test_gpus_and_cpus_from_slurm_env():
    assert topology.gpus_given({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}) == 4
    assert topology.gpus_given({"SLURM_STEP_GPUS": "2,3"}) == 2
    assert topology.gpus_given({"SLURM_GPUS_ON_NODE": "8"}) == 8
    assert topology.gpus_given({}) == 0
    assert topology.cpus_given({"SLURM_CPUS_ON_NODE": "16"}) == 16
    assert topology.cpus_given({"SLURM_JOB_CPUS_PER_NODE": "4(x2)"}) == 4


def test_the_job_reads_its_settings_from_plan_json(tmp_path):
    """The batch script passes only the run dir: pools, runtime, Ray settings and requeue
    bounds come from plan.json (Plan.from_dict + the job contract)."""
    import json

    from launcher.injob.contract import shown_digest
    from launcher.injob.supervise import parse_args, read_contract
    from launcher.plan import Plan, Pool, SlurmOptions
    from launcher.render.script import plan_json
    from launcher.runtime import Runtime
    from launcher.spec import paths
    from launcher.spec.site import load_site

    plan = Plan(experiment="d", method="distillation", framework="verl", framework_version="0.9.1",
                config_name="ppo_trainer", launcher="ray", entry=("python3", "-m", "verl.trainer.main_ppo"),
                overrides=("trainer.nnodes=2",), run_dir=str(tmp_path), checkpoint_dir=f"{tmp_path}/checkpoints",
                pools=(Pool("train", "fake", 2, 4, 0, ("actor",)), Pool("teach", "fake-teach", 1, 4, 1, ("teacher",))),
                slurm=SlurmOptions(time="00:20:00", signal_lead_s=60, max_requeues=2))
    site = load_site(str(paths.site_dir() / "dev.yaml"))
    runtime = Runtime(framework="verl", version="0.9.1", kind="venv", path="/opt/rt", python="/opt/rt/bin/python")
    (tmp_path / "plan.json").write_text(plan_json(plan, site, runtime))
    contract = read_contract(parse_args(["--run-dir", str(tmp_path), "--shown", shown_digest(plan.entry, plan.overrides)]))
    assert contract.plan.pools == plan.pools  # the Plan's own pools: one encoding of a pool
    assert Runtime.from_dict(contract.runtime) == runtime and contract.ray.address_method == site.ray.address_method
    assert contract.ray.port_range == tuple(site.ray.port_range)
    assert contract.ray.barrier_timeout_s == site.ray.barrier_timeout_s
    assert contract.max_requeues == 2 and contract.requeue_lead == 90
    assert contract.plan.checkpoint_dir.endswith("/checkpoints")
    assert contract.plan.entry == plan.entry and contract.plan.overrides == plan.overrides  # plan.json's own
    assert Plan.from_dict(json.loads((tmp_path / "plan.json").read_text())) == plan


def test_placement_pins_verl_pools_to_slurm_pools():
    from dataclasses import replace

    from launcher.compile import catalog
    from launcher.injob import placement
    from launcher.plan import Pool

    verl_pools = catalog.get_method("0.9.1", "distillation").verl_pools  # the Plan's, from the recipe
    pools = (Pool("train", "fake", 2, 4, 0, ("actor",)), Pool("teach", "fake", 1, 4, 1, ("teacher",)))
    assert placement.slurm_pool_for("global_pool", pools, verl_pools).name == "train"
    assert placement.slurm_pool_for("teacher_pool", pools, verl_pools).name == "teach"
    assert placement.slurm_pool_for("rollout_pool_teacher_0", pools, verl_pools).name == "teach"
    assert placement.slurm_pool_for("reward_pool", pools, verl_pools).name == "train"  # no reward pool: train nodes
    # roles place, never names: a training pool called `teach` keeps the actor, and the pool
    # that roles: gives the teacher gets the teacher whatever it is called
    renamed = (replace(pools[0], name="teach"), replace(pools[1], name="big"))
    assert placement.slurm_pool_for("global_pool", renamed, verl_pools).name == "teach"
    assert placement.slurm_pool_for("teacher_pool", renamed, verl_pools).name == "big"
    named_reward = (replace(pools[0], name="reward"), replace(pools[1], name="rm", roles=("reward",)))
    assert placement.slurm_pool_for("global_pool", named_reward, verl_pools).name == "reward"
    assert placement.slurm_pool_for("reward_pool", named_reward, verl_pools).name == "rm"
    # a pool's role is the Plan's: main_ppo's global_pool holds the actor (and the roles that
    # share it), the separate trainers' rollout_pool_N the rollout, a model's own servers its role
    assert placement.role_of("global_pool", verl_pools) == "actor"
    assert placement.role_of("rollout_pool_reward_0", verl_pools) == "reward"
    separate = catalog.get_method("0.9.1", "grpo-one-step-off").verl_pools
    assert [placement.role_of(name, separate) for name in ("trainer_pool", "rollout_pool_2", "teacher_pool")] == [
        "actor", "rollout", "teacher"]
    assert placement.role_of("some_new_pool", separate) == "actor"  # unknown: with the actor
    scheme = placement.pool_bundles(pools[1])
    assert scheme == [[{"CPU": 3, "GPU": 1, "sf_pool_teach": 1}] * 4]
    assert placement.fitting_cpus(pools[0], 4)[0] == 1.0 and placement.fitting_cpus(pools[0], 64) == (3, None)


def test_role_report_names_a_role_off_its_pool():
    from dataclasses import replace

    from launcher.compile import catalog
    from launcher.injob import placement
    from launcher.plan import Pool

    verl_pools = catalog.get_method("0.9.1", "distillation").verl_pools
    pools = [Pool("train", "fake", 1, 1, 0, ("actor", "rollout")), Pool("teach", "fake", 1, 1, 1, ("teacher",))]
    placed = {"train": {"nodes": ["dev1"], "ok": True}, "teach": {"nodes": ["dev2"], "ok": True}}
    report = placement.role_report(pools, placed, verl_pools)
    assert [(r["role"], r["pool"], r["nodes"], r["ok"]) for r in report] == [
        ("actor", "train", ["dev1"], True), ("rollout", "train", ["dev1"], True), ("teacher", "teach", ["dev2"], True)]
    # a role verl would not put on the pool roles: names (here a reward role on a second pool
    # whose placement failed) is reported as not ok
    pools[1] = replace(pools[1], roles=("reward",))
    placed["teach"]["ok"] = False
    assert [r["ok"] for r in placement.role_report(pools, placed, verl_pools)] == [True, True, False]


def test_verl_main_patch_tags_bundles(monkeypatch):
    """The patch wraps verl's module-level placement_group as verl calls it (fake module)."""
    import types

    from launcher.injob import verl_main
    from launcher.plan import Pool

    calls = []

    class RayResourcePool:
        def __init__(self, name_prefix):
            self.name_prefix = name_prefix

        def get_placement_groups(self, strategy="STRICT_PACK"):
            return mod.placement_group(bundles=[{"CPU": 3, "GPU": 1}] * 2, strategy=strategy, name=self.name_prefix + "x")

    mod = types.SimpleNamespace(RayResourcePool=RayResourcePool,
                                placement_group=lambda bundles, **kw: calls.append(bundles) or "pg")
    monkeypatch.setenv("SF_JOB", job_json(Pool("train", "fake", 1, 2, 0), Pool("teach", "fake", 1, 2, 1, ("teacher",)),
                                          method="distillation"))
    verl_main.patch_base(mod)
    RayResourcePool("teacher_pool").get_placement_groups()
    RayResourcePool("global_pool").get_placement_groups()
    assert calls[0] == [{"CPU": 3, "GPU": 1, "sf_pool_teach": 1}] * 2
    assert calls[1] == [{"CPU": 3, "GPU": 1, "sf_pool_train": 1}] * 2


def test_usable_range_avoids_ephemeral_ports():
    assert ports.usable_range((20000, 59999), (32768, 60999)) == (20000, 32767)
    assert ports.usable_range((40000, 59999), (32768, 50000)) == (50001, 59999)
    assert ports.usable_range((40000, 41000), (32768, 60999)) == (40000, 41000)  # nothing else fits


def test_start_turns_let_at_most_n_workers_start_at_once_and_pass_on_when_released(tmp_path):
    """Ray 2.60 gives a starting node fixed 30 s windows: more nodes starting on one host than
    its CPUs can start in time miss them (64 at once on the 16-core GPU machine: 78-105 retries,
    and Ray alone never came up), so a worker holds one of N turns while it starts."""
    from launcher.injob import private

    assert private.start_turns(1) == private.START_TURNS_MIN and private.start_turns(16) == 16
    locks = private.lock_dir(str(tmp_path))
    turns = [private.start_turn(locks, 2, 0.0)[0] for _ in range(2)]
    assert all(t.held for t in turns) and len({t.path for t in turns}) == 2
    clock = iter(float(t) for t in range(100))
    slept = []
    late, waited = private.start_turn(locks, 2, 3.0, sleep=slept.append, clock=lambda: next(clock))
    # waited its limit, then starts anyway, on a lock-less turn its caller releases like any other
    assert not late.held and waited >= 3.0 and len(slept) == 2
    late.release()
    turns[0].release()
    turns[0].release()  # releasing twice (once Ray runs, again when the try ends) is harmless
    assert not turns[0].held
    again, waited = private.start_turn(locks, 2, 0.0)
    assert again.held and again.path == turns[0].path and waited < 1.0
    no_dir, waited = private.start_turn(None, 2, 60.0)  # no private lock dir: no turns
    assert not no_dir.held and waited == 0.0
    no_dir.release()


def test_port_reservations_lock_a_port_once_and_go_lock_less_without_a_lock_dir(tmp_path):
    """reserve answers None only for a port another process of this user holds; with no lock
    dir it answers a lock-less Reservation (the bind check is then all there is), the same
    convention as a start turn that came without a lock."""
    from launcher.injob import private

    locks = private.lock_dir(str(tmp_path))
    slot = private.reserve(locks, 18003)
    assert slot.held and slot.path.endswith("port18003")
    # flock locks belong to an open file: a second reserve (a new open) stands for another node
    assert private.reserve(locks, 18003) is None
    slot.release()
    again = private.reserve(locks, 18003)
    assert again.held
    again.release()
    lockless = private.reserve(None, 18003)
    assert not lockless.held and lockless.path == ""
    lockless.release()


def test_a_retrying_head_waits_for_its_span_and_a_first_try_does_not():
    """The head's span (the supervisor's choice) held by what a failed try left: a retry waits
    until the port frees; a first try, or a port held for good, is a collision."""
    import socket
    import threading

    from launcher.injob import node

    rng = (23000, 24023)
    span = ports.span_ports(23400)
    holder = socket.socket()
    holder.bind(("127.0.0.1", span.node_manager))
    args = dict(role="head", slot=0, port_range=rng, head_base=span.gcs, locks=None, address="127.0.0.1")
    try:
        got, reservation, why = node.pick_ports(**args)
        assert got is None and reservation is None and "port collision" in why and str(span.node_manager) in why
        assert f"(port {span.node_manager} taken, no process listens on it" in why  # bound, not listening
        got, _, why = node.pick_ports(**args, wait_s=0.6)
        assert got is None and "port collision" in why  # still held after the wait
        threading.Timer(0.3, holder.close).start()
        got, reservation, why = node.pick_ports(**args, wait_s=10)
        assert why is None and got == span and reservation is None  # the supervisor holds the head's span
    finally:
        holder.close()


def fake_socket_tables(proc, rows):
    """A /proc of `rows` (local "hexaddr:hexport", state, uid, inode) in net/tcp, an empty tcp6."""
    (proc / "net").mkdir()
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    body = "".join(f"   {i}: {local} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000 {uid:>5} "
                   f"0 {inode} 1 0000000000000000 100 0 0 10 0\n" for i, (local, state, uid, inode) in enumerate(rows))
    (proc / "net" / "tcp").write_text(header + body)
    (proc / "net" / "tcp6").write_text(header)


def test_a_ports_holder_is_named_from_the_kernels_socket_tables(tmp_path):
    """What a port-collision reason says of who holds the port: this user's process by name,
    pid and Slurm job; another user's by user only (their /proc is not readable)."""
    fake_socket_tables(tmp_path, [("0D00007F:4E20", "0A", 0, 111),       # 127.0.0.13:20000, root's
                                  ("00000000:4E21", "0A", 65534, 222),   # *:20001, nobody's
                                  ("0D00007F:4E22", "01", 0, 333)])      # 20002: a connection, no listener
    pid = tmp_path / "4242"
    (pid / "fd").mkdir(parents=True)
    (pid / "fd" / "7").symlink_to("socket:[111]")
    (pid / "comm").write_text("gcs_server\n")
    # the Slurm job is the one whose cgroup holds the process; its environment may name any job
    (pid / "environ").write_bytes(b"PATH=/bin\0SLURM_JOB_ID=99\0")
    (pid / "cgroup").write_text("6:freezer:/slurm_dev3/uid_0/job_51/step_0\n4:memory:/\n0::/\n")
    assert ports.holder_text(20000, str(tmp_path)) == "listened on by gcs_server (pid 4242, Slurm job 51, user root)"
    (pid / "cgroup").write_text("0::/user.slice\n")
    assert ports.holder_text(20000, str(tmp_path)) == "listened on by gcs_server (pid 4242, user root)"
    assert ports.holder_text(20001, str(tmp_path)) == "listened on by a process of user nobody (uid 65534)"
    assert ports.holder_text(20002, str(tmp_path)).startswith("no process listens on it")


def test_a_real_listener_is_found_with_this_process_as_its_holder():
    import os
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert f"(pid {os.getpid()}, user " in ports.holder_text(port)
    assert ports.listeners(port) == []


def test_a_worker_gets_a_free_span_with_its_locks_and_the_next_node_of_this_user_another(tmp_path):
    """pick_ports hands a worker's locks back (the NodeStart holds them for the node's life);
    while they are held, another node of this user on this host gets a span of its own; a port
    another program holds is never in a span."""
    import socket

    from launcher.injob import node, private

    rng = (23000, 24023)
    locks = private.lock_dir(str(tmp_path))
    assert locks is not None
    args = dict(role="worker", slot=1, port_range=rng, head_base=23400, locks=locks, address="127.0.0.1")
    start = ports.worker_start(23400, 1, rng)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", start + 3))
        holder.listen()
        first, held, why = node.pick_ports(**args)
        assert why is None and held.held and first.gcs > start + 3  # past the taken port
        second, other, _ = node.pick_ports(**args)
        assert other.held and not set(first.fixed()) & set(second.fixed())
        held.release()
        other.release()
        assert not held.held
        again, reservation, _ = node.pick_ports(**args)
        assert again == first
        reservation.release()


def test_a_full_range_is_refused_naming_the_range_its_holders_and_the_fix():
    """The reason when no span is free: the range exhausted on the host, the users listening
    in it (from the kernel's socket tables), a taken port and its holder, what to do."""
    import getpass
    import os
    import socket

    from launcher.injob import node_ports

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        why = node_ports.ports_taken_text("127.0.0.1", (port, port + 1023), [port, port + 1])
    assert why.startswith(f"port collision: ray.port_range {port}-{port + 1023} is exhausted on 127.0.0.1: "
                          f"no {ports.SPAN} consecutive ports of it are free (listening in the range: user ")
    assert f"user {getpass.getuser()} (uid {os.getuid()}) on " in why
    assert f"port {port}, {port + 1} taken, port {port} listened on by " in why and f"(pid {os.getpid()}" in why
    assert why.endswith("widen or move ray.port_range in the site file, ask the users named to free their ports, "
                        "or exclude the node")


def test_who_took_a_port_range_is_counted_by_user(tmp_path):
    """The reason when no slot is free names the users listening in the range, most ports first."""
    fake_socket_tables(tmp_path, [("0D00007F:4E20", "0A", 65534, 1), ("0D00007F:4E21", "0A", 65534, 2),
                                  ("00000000:4E22", "0A", 0, 3), ("0D00007F:4E23", "01", 0, 4),
                                  ("0D00007F:9C40", "0A", 0, 5)])  # 40000: outside the range
    assert ports.range_listeners((20000, 30000), str(tmp_path)) == {65534: 2, 0: 1}
    assert ports.range_holders_text((20000, 30000), str(tmp_path)) == (
        "listening in the range: user nobody (uid 65534) on 2 ports, user root (uid 0) on 1 port")
    assert ports.range_holders_text((50000, 50100), str(tmp_path)).startswith("nothing listens in the range")
