"""What the reconcile loop hands the executor from a job's spec: where the command starts
(``workdir``) and how long it has to checkpoint when preempted (``preempt_grace``, else the
control plane's ``DANLU_PREEMPT_GRACE``)."""

from __future__ import annotations

from pathlib import Path

from helpers import fake_loop, user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Node, gpu_type
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs

NOW = 1_000_000.0


def test_the_launch_carries_the_specs_workdir_and_grace(db: Database, tmp_path: Path) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 2, gpu_type("H100")),), NOW)
        body = {"command": ["python", "train.py"]}
        asks = {"name": "own", "workdir": "/data/run", "preempt_grace": "10m", **body}
        own = jobs.submit(s, asks, alice, now=NOW).id
        plain = jobs.submit(s, {"name": "plain", **body}, alice, now=NOW).id
    loop, world = fake_loop(
        db, (Node("a", 2, gpu_type("H100")),), tmp_path, make_policy("fifo"), 60
    )
    assert sorted(loop.run_once(now=NOW).launched) == sorted([own, plain])
    launched = {launch.job_id: launch for launch in world.launches}
    assert (launched[own].workdir, launched[own].preempt_grace) == ("/data/run", 600.0)
    assert (launched[plain].workdir, launched[plain].preempt_grace) == (None, None)
    assert loop.preempt_grace == 30.0  # the control plane's, for jobs that ask for none


def test_the_control_planes_grace_is_a_setting(db: Database, tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path, preempt_grace=120)
    loop = Reconciler(db, fake_loop(db, (), tmp_path, make_policy("fifo"), 1)[0].executor, settings)
    assert loop.preempt_grace == 120.0
