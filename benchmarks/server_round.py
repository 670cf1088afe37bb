"""Latency of the server's scheduling round at scale: the reconcile loop's transaction
(``build_snapshot`` + the policy + ``apply_plan``) on a real store, 1,000 nodes x 8 GPUs,
10,000 pending and 2,000 running jobs by default. Prints p50/p99 milliseconds of each part and
of the whole round over steady rounds (never asserted in tests).

The store is SQLite in a temporary directory (``--db-url`` for another, e.g. PostgreSQL; its
tables are dropped and re-created). Population is not timed: the jobs are submitted through
``jobs.submit`` on a one-node inventory, then the inventory grows to its full size and the
running jobs are started first-fit, not by the policy, so its first rounds reshuffle them
(the danlu policy's ``move_budget`` spreads that over rounds; ``--warmup`` rounds are run
untimed first). Each round, as in a running control plane: the jobs preempted last round
exit (back to PENDING), ``--churn`` running jobs finish and as many new ones are submitted
(not timed), the clock advances by 60 s, then the timed transaction, with one
:class:`StatusCache` and one policy object over all rounds, as the reconcile loop keeps
them, and the cyclic garbage collector paused in it, as the reconcile loop pauses it
(:func:`danlu.server.reconcile.collector_paused`), and with the control plane's collector
thresholds (``tune_collector``; ``--default-gc``: Python's).
The last line gives the collector's time per round cycle (the round and what happens
between rounds) and the part of it inside the timed rounds.

    python benchmarks/server_round.py [--nodes 1000] [--pending 10000] [--running 2000]
        [--rounds 30] [--churn 20] [--policy danlu] [--db-url URL] [--each] [--warmup 0]
        [--set KNOB=VALUE ...]  (a knob of the danlu policy, or an option of another)
"""

from __future__ import annotations

import argparse
import gc
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from danlu_pollux import add_knob_option, knob_settings
from sqlalchemy import select

from danlu.config import parse_option_pairs
from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import ConfigError
from danlu.sched import Plan, Start, make_policy
from danlu.sched.placement.gang import FreeMap
from danlu.server.db import Database, upgrade_database
from danlu.server.db.models import Base, Job
from danlu.server.reconcile import collector_paused, tune_collector
from danlu.server.services import cluster, jobs, record, users, view

SIZES = [1, 1, 1, 1, 2, 2, 4, 8]
RUNNING_SIZES = [1, 2, 4, 4, 4, 8]


def spec(rng: random.Random, name: str, sizes: list[int]) -> dict[str, Any]:
    return {
        "name": name,
        "command": ["true"],
        "resources": {"gpus": rng.choice(sizes)},
        "priority": rng.randint(0, 3),
        "training": {"expected_duration": rng.uniform(600, 36_000)},
    }


def nodes(count: int) -> list[Node]:
    h100 = gpu_type("H100")
    return [Node(f"node-{i:04d}", 8, h100, rack=f"rack-{i // 32}") for i in range(count)]


def populate(db: Database, args: argparse.Namespace, now: float) -> None:
    """Jobs on a one-node inventory (cheap admission), then the full inventory, then one
    untimed round starting ``args.running`` of the running-sized jobs first-fit."""
    rng = random.Random(args.seed)
    with db.session() as s:
        users.create_user(s, "alice", now=now)
        cluster.replace_inventory(s, nodes(1), fake=True, now=now)
    alice_jobs: list[str] = []
    with db.session() as s:
        alice = users.get_user(s, "alice")
        for i in range(args.running):
            alice_jobs.append(jobs.submit(s, spec(rng, f"r{i}", RUNNING_SIZES), alice, now=now).id)
        for i in range(args.pending):
            jobs.submit(s, spec(rng, f"p{i}", SIZES), alice, now=now + 1 + i * 1e-3)
    with db.session() as s:
        cluster.replace_inventory(s, nodes(args.nodes), fake=True, now=now)
    with db.session() as s:
        snap = view.build_snapshot(s, now + 30)
        free = FreeMap(snap.view, "first-fit")
        wanted = set(alice_jobs)
        starts = []
        for status in snap.view.pending:
            if status.id in wanted:
                alloc = free.place(status.request)  # taken from ``free`` when placed
                if alloc is not None:
                    starts.append(Start(status.id, alloc))
        record.apply_plan(s, Plan(starts=tuple(starts)), now + 30)


def churn(db: Database, rng: random.Random, count: int, t: float, serial: int) -> None:
    """What happens between two rounds: the preempted jobs checkpoint and exit (back to
    PENDING, as the executor reports), ``count`` running jobs finish and ``count`` new ones
    arrive."""
    with db.session() as s:
        for job in s.scalars(select(Job).where(Job.state == "PREEMPTING")):
            jobs.settle_exit(s, job, succeeded=False, exit_code=143, reason="checkpointed", now=t)
        running = list(s.scalars(select(Job).where(Job.state == "RUNNING")))
        for job in rng.sample(running, min(count, len(running))):
            jobs.settle_exit(s, job, succeeded=True, exit_code=0, reason="done", now=t)
        alice = users.get_user(s, "alice")
        for i in range(count):
            jobs.submit(s, spec(rng, f"n{serial}-{i}", SIZES), alice, now=t)


def ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--churn", type=int, default=20)
    parser.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="untimed rounds after the first (e.g. while a move budget spreads the reshuffle)",
    )
    parser.add_argument("--policy", default="danlu")
    parser.add_argument("--seed", type=int, default=0)
    add_knob_option(parser)
    parser.add_argument("--db-url", default=None)
    parser.add_argument(
        "--each", action="store_true", help="print every round's parts and its plan's size"
    )
    parser.add_argument(
        "--default-gc", action="store_true", help="Python's collector thresholds, not danlu up's"
    )
    args = parser.parse_args()
    try:  # the danlu policy's knobs by their types, another policy's options as JSON
        options = (
            knob_settings(parser, args)
            if args.policy == "danlu"
            else parse_option_pairs(args.set, "--set")
        )
        policy = make_policy(args.policy, **options)
    except (ValueError, ConfigError) as error:
        parser.error(f"--set: {error}")
    if not args.default_gc:
        tune_collector()

    with tempfile.TemporaryDirectory() as tmp:
        url = args.db_url or f"sqlite:///{Path(tmp) / 'danlu.db'}"
        if args.db_url:
            Database(url).engine.dispose()
            db0 = Database(url)
            Base.metadata.drop_all(db0.engine)
            with db0.engine.begin() as conn:
                conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
            db0.dispose()
        upgrade_database(url)
        db = Database(url)
        now = 1_000_000.0
        t0 = time.perf_counter()
        populate(db, args, now)
        with db.session() as s:
            held = len(list(s.scalars(select(Job.id).where(Job.state == "RUNNING"))))
        print(
            f"store: {url.split(':')[0]}, {args.nodes} x 8 GPUs, {held} running, "
            f"{args.pending} pending; populated in {time.perf_counter() - t0:.0f} s"
        )
        cache = view.StatusCache()
        rng = random.Random(args.seed + 1)
        parts: dict[str, list[float]] = {"snapshot": [], "policy": [], "apply": [], "round": []}
        t = now + 60
        collecting = [0.0, 0.0]  # collector seconds in all, and inside the timed rounds
        started: list[float] = []
        inside = [False]

        def timed_collections(phase: str, _info: dict[str, Any]) -> None:
            if phase == "start":
                started[:] = [time.perf_counter()]
            elif started:
                spent = time.perf_counter() - started[0]
                collecting[0] += spent
                collecting[1] += spent if inside[0] else 0.0

        gc.callbacks.append(timed_collections)
        for r in range(args.warmup + args.rounds + 1):
            if r == args.warmup + 1:
                collecting[:] = [0.0, 0.0]
            t += 60
            churn(db, rng, args.churn, t, r)
            marks = [time.perf_counter()]
            inside[0] = True
            with collector_paused(), db.session() as s:
                snap = view.build_snapshot(s, t, cache)
                marks.append(time.perf_counter())
                plan = policy.schedule(snap.view)
                marks.append(time.perf_counter())
                record.apply_plan(s, plan, t, snap.withheld, snap)
                marks.append(time.perf_counter())
            marks.append(time.perf_counter())  # the commit included
            inside[0] = False
            for name, i in (("snapshot", 0), ("policy", 1), ("apply", 2)):
                parts[name].append(marks[i + 1] - marks[i])
            parts["round"].append(marks[-1] - marks[0])
            if args.each:
                print(
                    f"round {r:3d}: {len(plan.starts)} starts, {len(plan.preempts)} preempts; "
                    + ", ".join(f"{k} {1000 * v[-1]:.1f}" for k, v in parts.items())
                    + " ms"
                )
            if r <= args.warmup:  # the first round after population starts many jobs
                for values in parts.values():
                    values.clear()
        gc.callbacks.remove(timed_collections)
        db.dispose()
    print(f"{'part':>9} {'p50 ms':>8} {'p99 ms':>8}   ({args.rounds} steady rounds)")
    for name, values in parts.items():
        print(f"{name:>9} {ms(values, 0.5):8.1f} {ms(values, 0.99):8.1f}")
    print(f"statuses reused: {cache.hits}, rebuilt: {cache.misses}")
    per_round = 1000 / max(args.rounds, 1)
    print(
        f"collector: {collecting[0] * per_round:.1f} ms per round cycle in all, "
        f"{collecting[1] * per_round:.1f} ms of it inside the timed rounds"
    )


if __name__ == "__main__":
    main()
