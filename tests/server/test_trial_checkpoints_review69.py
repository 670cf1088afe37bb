"""Each task of a job array and each trial of a sweep checkpoints in a directory of its own: a
spec's explicit ``checkpoint_dir`` becomes ``<checkpoint_dir>/<the trial's job name>`` in the
trial's job spec. Before, every trial got the one directory: run one after the other, task 1
resumed from task 0's last checkpoint instead of doing its own work; run at once, one task's
retention deleted the other's half-written checkpoint and it resumed from the other's step.
And a danlu.train job's Job ``checkpoint_step`` follows the checkpoints it writes (it stayed
null)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, user_and_nodes, wait_for

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.core.job_array import array_sweep, parse_array
from danlu.core.spec import MAX_PATH
from danlu.core.sweep import parse_sweep
from danlu.server.db import Database
from danlu.server.services import jobs, sweeps

NOW = 1_000_000.0
NODE = Node("a", 8, gpu_type("H100"))
SRC = str(Path(__file__).parents[2] / "src")


def _job(**extra: Any) -> dict[str, Any]:
    return {"name": "train", "command": ["python", "train.py"], "resources": {"gpus": 1}, **extra}


def _lr_sweep(**trial: Any) -> dict[str, Any]:
    return {
        "name": "lr",
        "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}, **trial},
        "parameters": {"lr": {"values": [0.1, 0.01, 0.001]}},
        "method": "grid",
        "parallel": 3,
    }


def _trial_dirs(db: Database, body: dict[str, Any]) -> dict[str, str | None]:
    """Submit the sweep ``body``; each trial's job name and its spec's checkpoint_dir."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep = sweeps.create(s, body, alice, now=NOW)
        trials = [jobs.get_job(s, r.job_id) for r in sweeps.results(s, sweep)]
        return {job.name: jobs.job_spec(job).checkpoint_dir for job in trials}


@pytest.mark.parametrize(
    ("checkpoint_dir", "expected"),
    [
        ("/ck", "/ck/{}"),
        ("/ck/", "/ck/{}"),
        ("s3://bucket/run", "s3://bucket/run/{}"),
    ],
    ids=["path", "trailing-slash", "url"],
)
def test_each_array_task_checkpoints_in_a_directory_of_its_own(
    db: Database, checkpoint_dir: str, expected: str
) -> None:
    body = array_sweep(_job(checkpoint_dir=checkpoint_dir), parse_array("0-2"))
    dirs = _trial_dirs(db, body)
    assert dirs == {name: expected.format(name) for name in ("train-0", "train-1", "train-2")}


def test_each_sweep_trial_checkpoints_in_a_directory_of_its_own(db: Database) -> None:
    dirs = _trial_dirs(db, _lr_sweep(checkpoint_dir="/shared/ckpt"))
    assert dirs == {f"lr-{n}": f"/shared/ckpt/lr-{n}" for n in range(3)}


def test_trials_without_a_checkpoint_dir_keep_the_default(db: Database) -> None:
    """Without ``checkpoint_dir`` each trial's job gets its own under the home at launch, as
    any job: the spec stays without one."""
    assert set(_trial_dirs(db, _lr_sweep()).values()) == {None}


def test_trials_of_a_sweep_whose_name_is_cut_never_share_a_directory(db: Database) -> None:
    """A 63-character sweep name is cut to fit ``-<n>``: the names, hence the directories,
    stay apart (the number after the last '-' is the trial's)."""
    body = array_sweep(_job(name="x" * 63, checkpoint_dir="/ck"), parse_array("0-11"))
    dirs = _trial_dirs(db, body)
    assert len(dirs) == 12 and len(set(dirs.values())) == 12
    assert all(d == f"/ck/{name}" and len(name) == 63 for name, d in dirs.items())


def test_a_rerun_of_a_task_uses_the_tasks_own_directory(db: Database) -> None:
    body = array_sweep(_job(checkpoint_dir="/ck"), parse_array("0-1"))
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep = sweeps.create(s, body, alice, now=NOW)
        task = jobs.get_job(s, sweeps.results(s, sweep)[1].job_id)
        jobs.cancel_job(s, task.id, alice, now=NOW + 1)
        assert jobs.rerun_spec(jobs.get_job(s, task.id)).checkpoint_dir == "/ck/train-1"


@pytest.mark.parametrize(
    ("array", "field"),
    [(True, "checkpoint_dir"), (False, "trial.checkpoint_dir")],
    ids=["array", "sweep"],
)
def test_a_checkpoint_dir_too_long_for_the_trials_directories_is_refused(
    array: bool, field: str
) -> None:
    """The directory of the trial with the longest name must be a path a job takes: a
    ``checkpoint_dir`` that leaves no room for it is refused at submission, naming the field
    (the array's own for ``danlu submit --array``), not when a trial is submitted."""
    long_dir = "/" + "d" * (MAX_PATH - 4)  # fits alone, not with "/train-0"
    body = (
        array_sweep(_job(checkpoint_dir=long_dir), parse_array("0-1"))
        if array
        else _lr_sweep(checkpoint_dir=long_dir)
    )
    with pytest.raises(SpecError) as info:
        parse_sweep(body)
    assert info.value.field == field
    assert "directory of its own" in info.value.message and "shorten" in info.value.message


TASK = """
import os, sys, time, torch
import danlu.train as dt
steps, every, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = [(torch.randn(4), torch.randn(1)) for _ in range(64)]
def loss_fn(m, b):
    time.sleep(0.05)
    return torch.nn.functional.mse_loss(m(b[0]), b[1])
with dt.init(model, opt, global_batch_size=4, dataset_size=len(data), progress=False,
             checkpoint_every_steps=every, report_interval_s=0.2) as ctx:
    with open(os.path.join(out, os.environ["DANLU_ARRAY_INDEX"]), "w") as f:
        f.write(f"{ctx.step_num} {os.environ['DANLU_CHECKPOINT_DIR']}")
    ctx.stop_at_step(steps)
    for _ in ctx.epochs(10):
        for b in ctx.batches(data):
            ctx.step(b, loss_fn)
            if ctx.step_num >= steps:
                break
        if ctx.step_num >= steps:
            break
"""


@pytest.mark.slow
def test_array_tasks_of_danlu_train_each_resume_their_own_and_report_it(tmp_path: Path) -> None:
    """Two danlu.train tasks of 7 steps one after the other with one ``checkpoint_dir``: task
    1 starts from step 0 in its own directory (it started at task 0's last checkpoint, 6),
    and each task's Job says its last checkpoint, 6 (``checkpoint_step`` stayed null)."""
    script, out, shared = tmp_path / "task.py", tmp_path / "out", tmp_path / "shared"
    script.write_text(TASK)
    out.mkdir()
    job = _job(
        name="arr",
        command=[sys.executable, str(script), "7", "2", str(out)],
        env={"PYTHONPATH": SRC},
        checkpoint_dir=str(shared),
        max_restarts=0,
    )
    with live_server(tmp_path, fake_gpus="2x80GiB") as live, live.client() as c:
        reply = c.post("/sweeps", json=array_sweep(job, parse_array("0-1%1")))
        assert reply.status_code == 201, reply.text
        sweep_id = reply.json()["id"]

        def ended() -> dict[str, Any] | None:
            sweep: dict[str, Any] = c.get(f"/sweeps/{sweep_id}").json()
            return sweep if sweep["state"] != "RUNNING" else None

        sweep = wait_for(ended, 120, 0.2)
        assert sweep["state"] == "DONE", sweep
        tasks = [c.get(f"/jobs/{t['job_id']}").json() for t in sweep["trials"]]
    assert [t["state"] for t in tasks] == ["SUCCEEDED", "SUCCEEDED"]
    for index, task in enumerate(tasks):
        own = shared / f"arr-{index}"
        assert task["spec"]["checkpoint_dir"] == str(own)
        assert (out / str(index)).read_text() == f"0 {own}"  # its own work, from the start
        assert task["checkpoint_step"] == 6
        names = sorted(p.name for p in own.iterdir() if p.name.startswith("ckpt-"))
        assert [int(n.split("-")[1]) for n in names] == [2, 4, 6]
    assert sorted(p.name for p in shared.iterdir()) == ["arr-0", "arr-1"]


@pytest.mark.slow
def test_a_held_jobs_preemption_checkpoint_is_its_checkpoint_step(tmp_path: Path) -> None:
    """A danlu.train job held while it runs is preempted (SIGTERM): it checkpoints at the next
    step and exits 75, and its Job's ``checkpoint_step`` is that checkpoint's step, before it
    runs again (it stayed null, held or released)."""
    script, out = tmp_path / "task.py", tmp_path / "out"
    script.write_text(TASK.replace('os.environ["DANLU_ARRAY_INDEX"]', '"run"'))
    out.mkdir()
    job = _job(
        name="held",
        command=[sys.executable, str(script), "100000", "1000", str(out)],
        env={"PYTHONPATH": SRC},
    )
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        reply = c.post("/jobs", json=job)
        assert reply.status_code == 201, reply.text
        job_id = reply.json()["id"]

        def stepping() -> dict[str, Any] | None:
            found: dict[str, Any] = c.get(f"/jobs/{job_id}").json()
            assert found["state"] in ("PENDING", "RUNNING"), found
            return found if (out / "run").exists() and found["observed"] else None

        assert wait_for(stepping, 120, 0.2)["checkpoint_step"] is None  # none written yet
        held = c.patch(f"/jobs/{job_id}", json={"held": True})
        assert held.status_code == 200, held.text

        def preempted() -> dict[str, Any] | None:
            found: dict[str, Any] = c.get(f"/jobs/{job_id}").json()
            return found if found["state"] == "PENDING" and found["preemptions"] else None

        found = wait_for(preempted, 120, 0.2)
        directory = live.home / "checkpoints" / job_id
        steps = [int(p.name.split("-")[1]) for p in directory.glob("ckpt-*")]
    assert len(steps) == 1  # the preemption's, not a periodic one (every 1000 steps)
    assert found["checkpoint_step"] == steps[0] > 0
