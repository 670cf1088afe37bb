"""Sweeps: the reconcile loop submits a sweep's trials (``parallel`` at a time) as jobs with
their parameters in ``DANLU_HPARAMS``, stops the ones the median rule rules out, and ends the
sweep DONE; the API and ``danlu sweep`` submit, show and cancel them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import fake_loop, live_server, user_and_nodes, wait_for
from interleave import Interleave

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.executors import Outcome
from danlu.sched.registry import make_policy
from danlu.server.db import Database, User
from danlu.server.errors import AdmissionError, ConflictError, PermissionDenied
from danlu.server.services import cluster, events, jobs, members, metrics, projects, sweeps, users

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))
EXAMPLE = Path(__file__).parents[2] / "examples" / "sweeps"


def _sweep(**extra: Any) -> dict[str, Any]:
    return {
        "name": "lr",
        "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
        "parameters": {"lr": {"values": [0.1, 0.01, 0.001, 0.0001]}},
        "metric": {"name": "loss"},
        "method": "grid",
        "parallel": 2,
        **extra,
    }


def _report(db: Database, job_id: str, losses: list[float]) -> None:
    with db.session() as s:
        records = [{"step": 10 * (i + 1), "loss": v} for i, v in enumerate(losses)]
        metrics.ingest(s, jobs.get_job(s, job_id), records, now=NOW)


def test_a_sweep_runs_its_trials_stops_the_worst_and_ends(db: Database, tmp_path: Path) -> None:
    rule = {"rule": "median", "min_steps": 20, "min_trials": 2}
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep = sweeps.create(s, _sweep(early_stopping=rule), alice, now=NOW)
        sweep_id = sweep.id
        first = [r.job_id for r in sweeps.results(s, sweep)]
        assert len(first) == 2 and sweep.submitted == 2  # parallel: two at once
        trial = jobs.get_job(s, first[1])
        assert (trial.name, trial.sweep_id, trial.trial) == ("lr-1", sweep_id, 1)
        env = jobs.job_spec(trial).env
        assert json.loads(env["DANLU_HPARAMS"]) == {"lr": 0.01}
        assert (env["DANLU_SWEEP_ID"], env["DANLU_TRIAL"]) == (sweep_id, "1")
    loop, world = fake_loop(db, (NODE,), tmp_path, make_policy("fifo"), 1000)
    try:
        assert sorted(loop.run_once(now=NOW + 1).launched) == sorted(first)
        _report(db, first[0], [1.0, 0.5, 0.2])
        _report(db, first[1], [0.9, 0.4, 0.3])
        with db.session() as s:  # trial 0 ends: trial 2 takes its place
            jobs.cancel_job(s, first[0], alice, now=NOW + 2)
        submitted: list[str] = []
        for t in range(2, 6):  # the cancel is delivered, the run ends
            world.clock.advance(1)
            report = loop.run_once(now=NOW + t)
            assert report.stopped_early == []
            submitted += report.trials
        assert len(submitted) == 1
        third = submitted[0]
        _report(db, third, [2.0, 1.5])  # worse than both others' best by step 20 (0.5, 0.4)
        stopped = [loop.run_once(now=NOW + t).stopped_early for t in range(6, 12)]
        assert stopped == [[], [], [], [], [], [third]]  # judged at NOW + 1, then 10 s on
        with db.read_session() as s:
            job = jobs.get_job(s, third)
            assert job.cancel_reason == (
                "stopped early: best 1.5 by step 20 is worse than the median 0.45 of 2 other "
                "trials by that step"
            )
        for t in range(12, 18):  # the stop is delivered; trial 3 is the last one
            world.clock.advance(1)
            loop.run_once(now=NOW + t)
        with db.session() as s:
            assert sweeps.get(s, sweep_id).submitted == 4
            for job in jobs.list_jobs(s, states=["RUNNING", "PENDING"]):
                jobs.cancel_job(s, job.id, alice, now=NOW + 18)
        for t in range(18, 22):
            world.clock.advance(1)
            loop.run_once(now=NOW + t)
        with db.read_session() as s:
            done = sweeps.get(s, sweep_id)
            assert (done.state, done.reason) == ("DONE", "4 trials ended")
            results = sweeps.results(s, done)
            assert [(r.trial, r.best, r.step) for r in results] == [
                (0, 0.2, 30),
                (1, 0.3, 30),
                (2, 1.5, 20),
                (3, None, None),
            ]
            top = sweeps.best(sweeps.spec_of(done), results)
            assert top is not None and (top.trial, top.parameters) == (0, {"lr": 0.1})
    finally:
        loop.stop()


def test_sweeps_are_checked_owned_and_cancelled(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        bob = users.create_user(s, "bob", now=NOW)
        refused = {
            "trial.command: write the command as an argv list": _sweep(trial={"command": "x"}),
            "parameters.lr: grid search takes values lists only": _sweep(
                parameters={"lr": {"distribution": "uniform", "low": 0, "high": 1}}
            ),
            "trials: random search needs": _sweep(method="random"),
            "trial.env.DANLU_HPARAMS: is set by the sweep": _sweep(
                trial={"command": ["x"], "env": {"DANLU_HPARAMS": "{}"}}
            ),
        }
        for message, body in refused.items():
            with pytest.raises(SpecError) as caught:
                sweeps.create(s, body, alice, now=NOW)
            assert str(caught.value).startswith(message), caught.value
        never = _sweep(trial={"command": ["x"], "resources": {"gpus": 9}})
        with pytest.raises(AdmissionError, match=r"^trial\.resources\.gpus: "):
            sweeps.create(s, never, alice, now=NOW)  # as a job that can never fit
        sweep = sweeps.create(s, _sweep(), alice, now=NOW)
        assert sweeps.get(s, sweep.id[:5], alice) is sweep  # a unique prefix
        with pytest.raises(PermissionDenied):
            sweeps.get(s, sweep.id, bob)
        assert sweeps.list_sweeps(s, bob) == [] and len(sweeps.list_sweeps(s, alice)) == 1
        with pytest.raises(PermissionDenied):
            sweeps.cancel(s, sweep.id, bob)
        cancelled = sweeps.cancel(s, sweep.id, alice, now=NOW + 1)
        assert (cancelled.state, cancelled.reason) == ("CANCELLED", "cancelled by alice")
        states = {r.state for r in sweeps.results(s, cancelled)}
        assert states == {"CANCELLED"}
        with pytest.raises(ConflictError, match="already ended"):
            sweeps.cancel(s, sweep.id, alice)
        assert sweeps.advance(s, sweep.id, NOW + 2) == ([], [])


def test_an_admin_s_sweep_for_a_user_is_that_user_s(db: Database) -> None:
    """An admin's sweep whose trials name ``user: alice`` (as ``POST /jobs`` lets an admin
    submit for a user) was the admin's: alice could neither see nor cancel it, and its
    later trials went on in her name. It is hers now, as such a job is."""
    trial = {"command": ["python", "train.py"], "resources": {"gpus": 1}, "user": "alice"}
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        bob = users.create_user(s, "bob", now=NOW)
        root = users.create_user(s, "root", "admin", now=NOW)
        sweep = sweeps.create(s, _sweep(trial=trial), root, now=NOW)
        assert sweep.user_id == alice.id
        first = [r.job_id for r in sweeps.results(s, sweep)]
        assert {jobs.get_job(s, j).user_id for j in first} == {alice.id}
        assert sweeps.get(s, sweep.id, alice) is sweep
        assert [w.id for w in sweeps.list_sweeps(s, alice)] == [sweep.id]
        jobs.cancel_job(s, first[0], alice, now=NOW + 1)
        _stopped, more = sweeps.advance(s, sweep.id, NOW + 2)
        assert [jobs.get_job(s, j).user_id for j in more] == [alice.id]
        cancelled = sweeps.cancel(s, sweep.id, alice, now=NOW + 3)
        assert (cancelled.state, cancelled.reason) == ("CANCELLED", "cancelled by alice")
        # a user names only themselves; an unknown user is the trial's field
        with pytest.raises(PermissionDenied):
            sweeps.create(s, _sweep(trial=trial), bob, now=NOW)
        with pytest.raises(SpecError, match=r"^trial\.user: unknown user 'carol'"):
            sweeps.create(s, _sweep(trial={**trial, "user": "carol"}), root, now=NOW)
        mine = sweeps.create(s, _sweep(), root, now=NOW)  # no user named: the caller's
        assert mine.user_id == root.id


def test_a_trial_that_can_no_longer_be_submitted_fails_the_sweep(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        body = _sweep(trial={"command": ["x"], "resources": {"gpus": 2}}, parallel=1)
        sweep = sweeps.create(s, body, alice, now=NOW)
        first = sweeps.results(s, sweep)[0].job_id
        jobs.cancel_job(s, first, alice, now=NOW)
        # the inventory shrinks to one GPU: a 2-GPU trial never fits now
        cluster.replace_inventory(s, [Node("a", 1, gpu_type("H100"))], fake=True, now=NOW)
        assert sweeps.advance(s, sweep.id, NOW + 1) == ([], [])
        failed = sweeps.get(s, sweep.id)
        assert failed.state == "FAILED"
        assert failed.reason.startswith("trial 1 could not be submitted: asks for 2 GPUs")
        assert failed.reason.endswith(" (field trial.resources.gpus)"), failed.reason


def test_a_later_trials_refusal_names_its_field_after_the_words(sqlite_db: Database) -> None:
    """The refusal's text glued its field before its words: ``trial 1 could not be
    submitted: project: 'alice' is not a member ...``; the field comes after, as the
    sweep's spec names it."""
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        users.create_user(s, "bob", now=NOW)
        sweep = sweeps.create(s, _sweep(parallel=1), alice, now=NOW)
        jobs.cancel_job(s, sweeps.results(s, sweep)[0].job_id, alice, now=NOW)
        default = projects.get_project(s, "default")
        members.set_members(s, default, ["bob"])  # alice is no member from now on
        assert sweeps.advance(s, sweep.id, NOW + 1) == ([], [])
        failed = sweeps.get(s, sweep.id)
    assert (failed.state, failed.reason) == (
        "FAILED",
        "trial 1 could not be submitted: 'alice' is not a member of project 'default'; an "
        "admin adds them with: danlu project set default --members ...,alice (field "
        "trial.project)",
    )


@pytest.mark.parametrize("values", [[0.1, 0.01], [0.1]], ids=["a-trial-left", "all-ended"])
def test_a_sweep_cancelled_while_it_advances_stays_cancelled(
    db: Database, monkeypatch: pytest.MonkeyPatch, values: list[float]
) -> None:
    """The user's cancel commits while the reconcile loop's ``advance`` has read the sweep
    (PostgreSQL): the cancel waits for it, then cancels the trial it submitted, or finds
    the sweep it ended DONE (409); no trial of a cancelled sweep is left to run and no end
    is written over the cancel."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        body = _sweep(parameters={"lr": {"values": values}}, parallel=1)
        sweep = sweeps.create(s, body, alice, now=NOW)
        sweep_id, first = sweep.id, sweeps.results(s, sweep)[0].job_id
        jobs.cancel_job(s, first, alice, now=NOW + 1)  # trial 0 ended
    race = Interleave(db)
    race.pause_at(monkeypatch, sweeps, "_stop_early")  # advance has read the sweep
    outcome = race.run(
        lambda s: sweeps.advance(s, sweep_id, NOW + 2),
        lambda s: sweeps.cancel(s, sweep_id, alice, now=NOW + 2),
    )
    assert outcome.first_error is None
    with db.read_session() as s:
        ended = sweeps.get(s, sweep_id)
        trials = sweeps.results(s, ended)
        state, reason = ended.state, ended.reason
    assert {r.state for r in trials} == {"CANCELLED"}  # none left to run
    if len(values) == 2:  # advance submitted trial 1; the cancel that waited cancelled it
        assert outcome.second_error is None and outcome.first == ([], [trials[1].job_id])
        assert (state, reason) == ("CANCELLED", "cancelled by alice")
    else:  # advance ended the sweep; the cancel that waited found it ended
        assert isinstance(outcome.second_error, ConflictError)
        assert (state, reason) == ("DONE", "1 trial ended")
    assert outcome.second_waited == (db.dialect == "postgresql")  # for advance's row lock


def test_the_api_and_the_cli_run_the_example_sweep(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from danlu.cli.main import app

    spec = yaml.safe_load((EXAMPLE / "lr.yaml").read_text())
    spec["trial"]["command"] = [sys.executable, str(EXAMPLE / "regression.py"), "--steps", "12"]
    spec["trials"] = 3
    spec["early_stopping"] = None
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(spec))
    with live_server(tmp_path, fake_gpus="2x80GiB", policy="fifo") as live, live.client() as c:
        flags = ["--url", live.url, "--token", live.token]
        result = CliRunner().invoke(app, ["sweep", "submit", str(path), "--json", *flags])
        assert result.exit_code == 0, result.stderr
        submitted = json.loads(result.stdout)
        assert submitted["state"] == "RUNNING" and len(submitted["trials"]) == 2
        sweep_id = submitted["id"]

        def ended() -> dict[str, Any] | None:
            sweep: dict[str, Any] = c.get(f"/sweeps/{sweep_id}").json()
            return None if sweep["state"] == "RUNNING" else sweep

        done = wait_for(ended, 150, 0.5)
        assert done["state"] == "DONE", done
        assert [t["state"] for t in done["trials"]] == ["SUCCEEDED"] * 3
        assert all(t["best"] is not None and t["step"] == 12 for t in done["trials"])
        best = min(done["trials"], key=lambda t: t["best"])
        assert done["best"]["trial"] == best["trial"]
        assert set(best["parameters"]) == {"lr", "width", "optimizer"}
        shown = CliRunner().invoke(app, ["sweep", "show", sweep_id, *flags])
        assert shown.exit_code == 0 and f"best: trial {best['trial']}" in shown.stdout
        listed = CliRunner().invoke(app, ["sweep", "ls", *flags])
        assert sweep_id in listed.stdout and "3/3" in listed.stdout
        bad = c.post("/sweeps", json={**spec, "parallel": 0})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "parallel"
        r = c.post(f"/sweeps/{sweep_id}/cancel")
        assert r.status_code == 409 and "already ended" in r.json()["error"]["message"]
        assert c.get("/sweeps/nope").status_code == 404


def test_tpe_learns_from_the_ended_trials_and_needs_optuna(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = _sweep(
        method="tpe",
        trials=4,
        parallel=1,
        startup_trials=1,
        parameters={"lr": {"distribution": "log_uniform", "low": 1e-4, "high": 1.0}},
    )
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep = sweeps.create(s, body, alice, now=NOW)
        first = sweeps.results(s, sweep)[0]
        metrics.ingest(s, jobs.get_job(s, first.job_id), [{"step": 1, "loss": 0.25}], now=NOW)
        jobs.cancel_job(s, first.job_id, alice, now=NOW)
        _, submitted = sweeps.advance(s, sweep.id, NOW + 1)
        second = jobs.get_job(s, submitted[0])
        drawn = json.loads(jobs.job_spec(second).env["DANLU_HPARAMS"])
        assert 1e-4 <= drawn["lr"] <= 1.0 and drawn != first.parameters
        monkeypatch.setattr(sweeps.importlib.util, "find_spec", lambda name: None)
        with pytest.raises(SpecError, match="method: tpe needs Optuna on the server"):
            sweeps.create(s, body, alice, now=NOW)


def test_a_job_array_runs_each_index_once_and_waits(tmp_path: Path) -> None:
    """``danlu submit --array`` against a live control plane: each task a real process that
    reads its DANLU_ARRAY_INDEX, at most two at once; ``--wait`` exits 0 once all succeeded,
    and the array shows in ``danlu sweep ls / show``."""
    from typer.testing import CliRunner

    from danlu.cli.main import app

    out = tmp_path / "out"
    out.mkdir()
    code = (
        "import os, pathlib, sys; i = os.environ['DANLU_ARRAY_INDEX']; "
        "pathlib.Path(sys.argv[1], i).write_text(os.environ['DANLU_TRIAL'])"
    )
    job = {"name": "shard", "command": [sys.executable, "-c", code, str(out)], "array": "9"}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    with live_server(tmp_path, fake_gpus="2x80GiB", policy="fifo") as live:
        flags = ["--url", live.url, "--token", live.token]
        args = ["submit", str(path), "--array", "0-4:2,7%2", "--wait", *flags]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "submitted array" in result.stdout and "4 tasks, at most 2 at once" in result.stdout
        assert result.stdout.count(": SUCCEEDED") == 4  # each task's end, as danlu wait prints
        # each index once, trial numbers in index order (the spec's own "9" was overridden)
        assert {p.name: p.read_text() for p in out.iterdir()} == {
            "0": "0",
            "2": "1",
            "4": "2",
            "7": "3",
        }
        listed = CliRunner().invoke(app, ["sweep", "ls", "--json", *flags])
        (array,) = json.loads(listed.stdout)
        assert (array["array"], array["metric"], array["total"]) == (True, None, 4)
        assert array["spec"]["parallel"] == 2 and array["name"] == "shard"
        shown = CliRunner().invoke(app, ["sweep", "show", array["id"], *flags])
        assert shown.exit_code == 0 and f"array {array['id']} (shard): DONE" in shown.stdout
        table = CliRunner().invoke(app, ["sweep", "ls", *flags])
        assert "array" in table.stdout
        waited = CliRunner().invoke(app, ["wait", array["id"][:6], "--json", *flags])
        assert waited.exit_code == 0, waited.output  # an array: its tasks, all SUCCEEDED
        assert [j["state"] for j in json.loads(waited.stdout)] == ["SUCCEEDED"] * 4
        unknown = CliRunner().invoke(app, ["wait", "abcdef012345", *flags])
        assert unknown.exit_code == 2 and "no job, sweep or job array" in unknown.output
        from_spec = CliRunner().invoke(app, ["submit", str(path), "--json", *flags])
        assert from_spec.exit_code == 0, from_spec.output
        single = json.loads(from_spec.stdout)
        assert (single["array"], single["total"]) == (True, 1)  # the spec's array: "9"
        bad = CliRunner().invoke(app, ["submit", str(path), "--array", "3-1", *flags])
        assert bad.exit_code == 2 and "--array" in bad.output


def _array(db: Database, alice_id: int) -> str:
    body = {
        "name": "shard",
        "trial": {"command": ["python", "shard.py"], "resources": {"gpus": 1}, "max_restarts": 0},
        "parameters": {"index": {"values": [0, 1]}},
        "method": "grid",
        "parallel": 2,
        "array": True,
    }
    with db.session() as s:
        owner = s.get(User, alice_id)
        assert owner is not None
        return sweeps.create(s, body, owner, now=NOW).id


@pytest.mark.parametrize("outcome", ["SUCCEEDED", "FAILED"])
def test_a_job_after_an_array_waits_for_all_its_tasks(
    db: Database, tmp_path: Path, outcome: str
) -> None:
    """``depends_on`` naming an array: the job waits while any task runs, then starts when
    every task succeeded, or is cancelled when one failed."""
    with db.session() as s:
        alice_id = user_and_nodes(s, (NODE,), NOW).id
    array = _array(db, alice_id)
    with db.session() as s:
        alice = s.get(User, alice_id)
        assert alice is not None
        after = jobs.submit(
            s,
            {"name": "merge", "command": ["python", "merge.py"], "depends_on": [array[:6]]},
            alice,
            now=NOW,
        )
        assert after.waiting_on == array  # the full id, from a prefix
        assert after.pending_reason == f"waiting for array {array} (shard) to succeed"
        after_id = after.id
        tasks = [job.id for job in jobs.list_jobs(s) if job.sweep_id == array]
    loop, world = fake_loop(db, (NODE,), tmp_path, make_policy("fifo"), 100)
    if outcome == "FAILED":
        world.script(tasks[1], duration=50, outcome=Outcome.FAILED)
    try:
        assert sorted(loop.run_once(now=NOW + 1).launched) == sorted(tasks)
        world.clock.advance(200)
        for t in range(2, 8):
            loop.run_once(now=NOW + t)
        with db.read_session() as s:
            assert sweeps.get(s, array).state == "DONE"
            job = jobs.get_job(s, after_id)
            if outcome == "SUCCEEDED":
                assert job.state == "RUNNING" and job.waiting_on is None
            else:
                assert job.state == "CANCELLED"
                failed = jobs.get_job(s, tasks[1]).trial  # the array is DONE, a task FAILED
                assert events.list_events(s, after_id)[-1].reason == (
                    f"the array {array} (shard) it depends on ended DONE (task {failed} FAILED) "
                    "and will never succeed"
                )
    finally:
        loop.stop()


def test_a_job_after_a_cancelled_array_waits_for_its_tasks_to_exit(
    db: Database, tmp_path: Path
) -> None:
    """A cancelled array was judged ended at once, so a job ``--after ARRAY:finished``
    started while the tasks still ran (checkpointing within their grace, on their GPUs); a
    cancelled job's dependents wait for its run to exit, and so do an array's now."""
    with db.session() as s:
        alice_id = user_and_nodes(s, (NODE,), NOW).id
    array = _array(db, alice_id)
    with db.session() as s:
        alice = s.get(User, alice_id)
        assert alice is not None
        cleanup = {"job": array, "condition": "finished"}
        after_id = jobs.submit(
            s, {"name": "cleanup", "command": ["x"], "depends_on": [cleanup]}, alice, now=NOW
        ).id
        tasks = [job.id for job in jobs.list_jobs(s) if job.sweep_id == array]
    loop, world = fake_loop(db, (NODE,), tmp_path, make_policy("fifo"), 100)
    for task in tasks:
        world.script(task, duration=1000, checkpoint_seconds=None)  # runs out its grace
    try:
        assert sorted(loop.run_once(now=NOW + 1).launched) == sorted(tasks)
        with db.session() as s:
            owner = s.get(User, alice_id)
            assert owner is not None
            sweeps.cancel(s, array, owner, now=NOW + 2)
        assert loop.run_once(now=NOW + 3).launched == []
        with db.read_session() as s:
            assert {jobs.get_job(s, task).state for task in tasks} == {"RUNNING"}
            assert jobs.get_job(s, after_id).waiting_on == array
        world.clock.advance(200)  # past the grace: the tasks are killed
        for t in range(4, 10):
            loop.run_once(now=NOW + t)
        with db.read_session() as s:
            assert {jobs.get_job(s, task).state for task in tasks} == {"CANCELLED"}
            assert jobs.get_job(s, after_id).state == "RUNNING"
    finally:
        loop.stop()
