"""Port blocks per (job, node slot), temp dir length, node addresses, resource names."""
from __future__ import annotations

import pytest
from unit_helpers import job_json

from launcher.injob import address, ports, topology


def test_blocks_never_overlap_for_two_jobs_and_slots():
    rng = (20000, 59999)
    for a, b in [(62, 63), (100, 101), (1, 2), (123456, 123457), (7, 7 + ports.n_blocks(rng) - 1)]:
        seen = {}
        for job in (a, b):
            for slot in range(ports.SLOTS_PER_JOB):
                for port in ports.node_ports(job, slot, rng).all_ports():
                    assert rng[0] <= port <= rng[1]
                    assert port not in seen, f"port {port} of job {job} slot {slot} also in {seen[port]}"
                    seen[port] = (job, slot)


def test_layout_inside_slot():
    p = ports.node_ports(5, 1, (20000, 59999))
    fixed = [p.gcs, p.node_manager, p.object_manager, p.dashboard_agent_grpc, p.dashboard_agent_listen,
             p.metrics_export, p.runtime_env_agent, p.client_server, p.dashboard, p.rdzv]
    assert len(set(fixed)) == len(fixed)
    assert max(fixed) < p.min_worker < p.max_worker
    assert p.max_worker - p.min_worker + 1 == ports.SLOT_SIZE - ports.N_FIXED
    assert ports.head_ports(5, (20000, 59999)) == ports.node_ports(5, 0, (20000, 59999))


def test_same_job_is_deterministic_and_range_too_small():
    assert ports.node_ports(99, 3, (30000, 40000)) == ports.node_ports(99, 3, (30000, 40000))
    with pytest.raises(ValueError, match="widen"):
        ports.node_ports(1, 0, (30000, 30100))


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


def test_candidate_blocks_start_at_the_jobs_block_and_visit_every_block_once():
    from launcher.injob import ports as P

    rng = (20000, 32767)
    count = P.n_blocks(rng)
    order = P.candidate_blocks(P.job_block(30, rng), rng)
    assert order[0] == 30 % count and sorted(order) == list(range(count))
    # the same slot in two blocks never shares a port
    a, b = P.block_ports(order[0], 3, rng), P.block_ports(order[1], 3, rng)
    assert not set(a.all_ports()) & set(b.all_ports())
    assert P.node_ports(30, 3, rng) == a


def test_a_worker_moves_to_the_next_block_when_its_slot_is_taken(tmp_path, monkeypatch):
    import socket

    from launcher.injob import node
    from launcher.injob import ports as P

    rng = (20000, 32767)
    first = P.block_ports(P.job_block(7, rng), 1, rng)
    holder = socket.socket()
    holder.bind(("127.0.0.1", first.node_manager))
    try:
        assert node.busy_ports("127.0.0.1", first, head=False) == [first.node_manager]
        nxt = P.block_ports(P.candidate_blocks(P.job_block(7, rng), rng)[1], 1, rng)
        assert node.busy_ports("127.0.0.1", nxt, head=False) == []
    finally:
        holder.close()


def test_nodes_past_the_eighth_start_in_the_next_block_so_sixteen_nodes_of_one_job_share_no_port():
    from launcher.injob import ports as P

    rng = (20000, 32767)
    first = P.job_block(30, rng)
    assert [P.slot_first_block(first, s) for s in (0, 7, 8, 15, 16)] == [first, first, first + 1, first + 1,
                                                                          first + 2]
    seen: set[int] = set()
    for slot in range(16):  # 16 emulated nodes of one job on one host (dev cluster --nodes 16)
        block = P.candidate_blocks(P.slot_first_block(first, slot), rng)[0]
        ports = set(P.block_ports(block, slot, rng).all_ports())
        assert not ports & seen
        seen |= ports


def test_candidate_slots_own_slot_first_then_every_slot_of_every_block():
    rng = (20000, 20000 + 3 * ports.JOB_BLOCK - 1)
    slots = ports.candidate_slots(1, 2, rng)
    assert slots[0] == (1, 2) and slots[1] == (1, 3) and slots[ports.SLOTS_PER_JOB] == (2, 2)
    assert len(slots) == len(set(slots)) == 3 * ports.SLOTS_PER_JOB
    # two slots never share a port, head-only ports (metrics) included
    seen = set()
    for block, slot in slots:
        mine = set(ports.block_ports(block, slot, rng).all_ports())
        assert not mine & seen
        seen |= mine


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


def test_port_reservations_lock_a_slot_once_and_go_lock_less_without_a_lock_dir(tmp_path):
    """reserve answers None only for a slot another process of this user holds; with no lock
    dir it answers a lock-less Reservation (the bind check is then all there is), the same
    convention as a start turn that came without a lock."""
    from launcher.injob import private

    locks = private.lock_dir(str(tmp_path))
    slot = private.reserve(locks, 3, 1)
    assert slot.held and slot.path.endswith("b3s1")
    # flock locks belong to an open file: a second reserve (a new open) stands for another node
    assert private.reserve(locks, 3, 1) is None
    slot.release()
    again = private.reserve(locks, 3, 1)
    assert again.held
    again.release()
    lockless = private.reserve(None, 3, 1)
    assert not lockless.held and lockless.path == ""
    lockless.release()


def test_a_retrying_head_waits_for_its_slot_and_a_first_try_does_not():
    """The head's slot (the supervisor's choice) held by what a failed try left: a retry waits
    until the port frees; a first try, or a port held for good, is a collision."""
    import socket
    import threading

    from launcher.injob import node
    from launcher.injob import ports as P

    rng = (20000, 32767)
    block = P.job_block(11, rng)
    ports = P.block_ports(block, 0, rng)
    holder = socket.socket()
    holder.bind(("127.0.0.1", ports.node_manager))
    args = dict(role="head", slot=0, port_range=rng, first_block=block, head_slot=0, locks=None,
                address="127.0.0.1")
    try:
        got, reservation, why = node.pick_ports(**args)
        assert got is None and reservation is None and "port collision" in why and str(ports.node_manager) in why
        assert f"(port {ports.node_manager} taken, no process listens on it" in why  # bound, not listening
        got, _, why = node.pick_ports(**args, wait_s=0.6)
        assert got is None and "port collision" in why  # still held after the wait
        threading.Timer(0.3, holder.close).start()
        got, reservation, why = node.pick_ports(**args, wait_s=10)
        assert why is None and got == ports and reservation is None  # the supervisor holds the head's slot
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


def test_a_worker_gets_its_slot_with_its_reservation_and_the_next_node_the_next_slot(tmp_path):
    """pick_ports hands a worker's reservation back (the NodeStart holds it for the node's life);
    while it is held, another node of this user on this host gets the next slot."""
    from launcher.injob import node, private
    from launcher.injob import ports as P

    rng = (20000, 32767)
    locks = private.lock_dir(str(tmp_path))
    assert locks is not None
    args = dict(role="worker", slot=1, port_range=rng, first_block=3, head_slot=0, locks=locks, address="127.0.0.1")
    first, held, why = node.pick_ports(**args)
    assert why is None and held.held and first == P.block_ports(3, 1, rng)
    second, other, _ = node.pick_ports(**args)
    assert second == P.block_ports(3, 2, rng) and other.held
    held.release()
    other.release()
    again, reservation, _ = node.pick_ports(**args)
    assert again == first
    reservation.release()


def test_who_took_a_port_range_is_counted_by_user(tmp_path):
    """The reason when no slot is free names the users listening in the range, most ports first."""
    fake_socket_tables(tmp_path, [("0D00007F:4E20", "0A", 65534, 1), ("0D00007F:4E21", "0A", 65534, 2),
                                  ("00000000:4E22", "0A", 0, 3), ("0D00007F:4E23", "01", 0, 4),
                                  ("0D00007F:9C40", "0A", 0, 5)])  # 40000: outside the range
    assert ports.range_listeners((20000, 30000), str(tmp_path)) == {65534: 2, 0: 1}
    assert ports.range_holders_text((20000, 30000), str(tmp_path)) == (
        "listening in the range: user nobody (uid 65534) on 2 ports, user root (uid 0) on 1 port")
    assert ports.range_holders_text((50000, 50100), str(tmp_path)).startswith("nothing listens in the range")
