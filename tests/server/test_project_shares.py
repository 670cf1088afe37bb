"""Projects' fair-share weights and recent usage in the control plane: the store's recent
usage against the exact decay, the view's projects, and a reconcile loop in which a project
that used the GPUs lately lets the other go first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import fake_loop, live_server, spec, user_and_nodes, wait_for

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.sched.project_usage import ProjectShare, stretch_weight
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.services import jobs, projects, usage
from danlu.server.services.view import build_snapshot

T = 1_000_000.0
H = 1800.0
NODE = Node("a", 4, gpu_type("H100"))
BODY = {"command": ["python", "train.py"], "resources": {"gpus": 1}}


def _gpus(*indices: int) -> list[dict[str, object]]:
    return [{"node": "a", "gpu": g, "milli": 1000, "memory": 80 * GiB} for g in indices]


def _exact(stretches: list[tuple[str, int, float, float]], now: float) -> dict[str, float]:
    exact: dict[str, float] = {}
    for project, milli, start, end in stretches:
        weight = stretch_weight(start, min(end, now), now, H)
        exact[project] = exact.get(project, 0.0) + milli * weight
    return exact


def test_recent_usage_from_the_store_follows_the_exact_decay(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        projects.create_project(s, "vision", share=2.0, now=T)
        projects.create_project(s, "speech", now=T)
        alice_id = alice.id

    def stretch(project: str, gpus: tuple[int, ...], start: float, end: float | None) -> None:
        with db.session() as s:
            owner = s.get(type(alice), alice_id)
            assert owner is not None
            job = jobs.submit(s, {"name": "j", "project": project, **BODY}, owner, now=start)
            jobs.change_state(s, job, JobState.RUNNING, "go", start, allocation=_gpus(*gpus))
            job.launched_attempt = job.attempt  # the executor took it
            if end is not None:
                jobs.change_state(s, job, JobState.SUCCEEDED, "done", end)

    done = [
        ("vision", 2000, T, T + 3000),
        ("vision", 1000, T + 1000, T + 1500),
        ("speech", 1000, T - 20_000, T - 15_000),
    ]
    for project, milli, start, end in done:
        stretch(project, tuple(range(milli // 1000)), start, end)
    stretch("speech", (3,), T + 2000, None)  # still running
    now = T + 4000
    with db.read_session() as s:
        finished = usage.finished_recent_usage(s, now, H)
        assert finished == pytest.approx(_exact(done, now), rel=0.025)
        cache = usage.RecentUsageCache(H)
        assert cache.read(s, now).finished == pytest.approx(finished)
        snapshot = build_snapshot(s, now, recent=cache.read(s, now))
        running = 1000 * stretch_weight(T + 2000, now, now, H)
        assert snapshot.view.projects["vision"] == ProjectShare(2.0, finished["vision"])
        assert snapshot.view.projects["speech"].weight == 1.0
        assert snapshot.view.projects["speech"].recent_milli == pytest.approx(
            finished["speech"] + running
        )
        plain = build_snapshot(s, now).view.projects  # no policy asking: weights only
        assert plain == {"vision": ProjectShare(2.0)}
        standing = usage.standing(s, now, H)
        assert standing["vision"].gpus_held == 0.0
        assert standing["vision"].recent_gpus == pytest.approx(finished["vision"] / 1000)
        assert standing["speech"].gpus_held == 1.0
        assert standing["speech"].recent_gpus == pytest.approx(
            (finished["speech"] + running) / 1000
        )
        assert usage.standing(s, now, 0.0) == {"speech": usage.Standing(1.0, None)}
    # a stretch that ends after the cache's full read is added exactly at the next read
    stretch("vision", (1, 2), T + 4000, T + 4020)
    later = now + 30
    with db.read_session() as s:
        assert cache.reread == H / usage.RECENT_BUCKETS
        read = cache.read(s, later).finished
        expected = {p: v * 2 ** (-30 / H) for p, v in finished.items()}
        expected["vision"] += 2000 * stretch_weight(T + 4000, T + 4020, later, H)
        assert read == pytest.approx(expected, rel=1e-9)
        again = cache.read(s, now + 2 * cache.reread).finished  # a full read again
        full = usage.finished_recent_usage(s, now + 2 * cache.reread, H)
        assert again == pytest.approx(full)


def test_a_projects_share_is_checked_and_changed(db: Database) -> None:
    with db.session() as s:
        with pytest.raises(SpecError, match="share"):
            projects.create_project(s, "zero", share=0.0, now=T)
        with pytest.raises(SpecError, match="share"):
            projects.create_project(s, "huge", share=1e7, now=T)
        made = projects.create_project(s, "team", now=T)
        assert made.share == 1.0
        assert projects.update_project(s, "team", share=3.5).share == 3.5
        assert projects.update_project(s, "team", priority=2).share == 3.5  # left alone
        with pytest.raises(SpecError, match="share"):
            projects.update_project(s, "team", share=float("nan"))


def _after_an_hour_of_vision(db: Database, tmp_path: Path, **options: object) -> list[str]:
    """vision runs 4 jobs on the 4 GPUs for an hour; a minute in, both projects queue 4
    more: the projects of the 4 started when vision's first ones end."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        for name in ("vision", "speech"):
            projects.create_project(s, name, now=T)
        first = [
            jobs.submit(s, {"name": f"v{i}", "project": "vision", **BODY}, alice, now=T).id
            for i in range(4)
        ]
    loop, world = fake_loop(db, (NODE,), tmp_path, make_policy("fair-share", **options), 3600)
    try:
        assert sorted(loop.run_once(now=T).launched) == sorted(first)
        queued: dict[str, str] = {}
        with db.session() as s:
            for project in ("vision", "speech"):
                for i in range(4):
                    spec = {"name": f"{project}{i}", "project": project, **BODY}
                    queued[jobs.submit(s, spec, alice, now=T + 60).id] = project
        world.clock.advance(3600)
        launched: list[str] = []
        for t in range(3600, 3700, 10):
            launched += loop.run_once(now=T + t).launched
        return sorted(queued[job_id] for job_id in launched)
    finally:
        loop.stop()


def test_a_project_that_used_the_gpus_lately_lets_the_other_go_first(
    db: Database, tmp_path: Path
) -> None:
    """With a half-life of an hour vision's standing is 2 GPUs when its jobs end: speech
    starts 3 of the 4 (0, 1, 2 GPUs held; then a tie, vision's older job first)."""
    started = _after_an_hour_of_vision(db, tmp_path, half_life=3600.0)
    assert started == ["speech", "speech", "speech", "vision"]


def test_without_history_the_projects_alternate(db: Database, tmp_path: Path) -> None:
    started = _after_an_hour_of_vision(db, tmp_path)
    assert started == ["speech", "speech", "vision", "vision"]


def test_the_api_and_the_cli_show_each_projects_standing(tmp_path: Path) -> None:
    """``GET /projects`` and ``danlu project ls``: the GPUs each project holds and, with a
    fair-share policy that keeps a history, its recent usage."""
    from typer.testing import CliRunner

    from danlu.cli.main import app

    options = '{"half_life": 3600}'
    server = live_server(tmp_path, fake_gpus="2x80GiB", policy="fair-share", policy_options=options)
    with server as live, live.client() as c:
        assert c.post("/projects", json={"name": "vision", "share": 2}).status_code == 201
        assert c.post("/projects", json={"name": "speech"}).status_code == 201
        job = spec("hold", "import time; time.sleep(60)", project="vision")
        job_id = c.post("/jobs", json=job).json()["id"]
        wait_for(lambda: c.get(f"/jobs/{job_id}").json()["state"] == "RUNNING", 30)

        def vision() -> dict[str, Any]:
            rows = {row["name"]: row for row in c.get("/projects").json()}
            return dict(rows["vision"])

        first = vision()
        assert (first["share"], first["gpus_held"]) == (2.0, 1.0)
        later = wait_for(lambda: (row := vision())["recent_gpus"] > first["recent_gpus"] and row)
        assert 0 < later["recent_gpus"] < 0.01  # a second or so of one GPU, of an hour's weight
        flags = ["--url", live.url, "--token", live.token]
        listed = CliRunner().invoke(app, ["project", "ls", *flags])
        assert listed.exit_code == 0, listed.output
        line = next(row for row in listed.stdout.splitlines() if "vision" in row)
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        assert cells[-4:] == ["2", "1.00", "0.00", "all"]  # share, held, recent, members
        idle = {row["name"]: row for row in c.get("/projects").json()}["speech"]
        assert (idle["share"], idle["gpus_held"], idle["recent_gpus"]) == (1.0, 0.0, 0.0)
        metrics = httpx.get(f"{live.url}/metrics").text
        recent = {
            line.split('"')[1]: float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("danlu_project_recent_gpus{")
        }
        assert recent["speech"] == 0.0 and 0 < recent["vision"] < 0.01
        assert 'danlu_project_share{project="vision"} 2.0' in metrics
        c.post(f"/jobs/{job_id}/cancel")
