"""Listing jobs by when they were submitted and by name: ``GET /jobs?since=&name=`` and
``danlu ls --since 1d --name 'train-*'`` (as ``sacct --starttime`` and ``--name``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import live_server, spec, submit
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli
from danlu.cli.main import app
from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database
from danlu.server.errors import NotFoundError
from danlu.server.services import cluster, jobs, users

NOW = 1_000_000.0


def test_jobs_by_submission_time_and_name_pattern(db: Database) -> None:
    with db.session() as s:
        alice = users.create_user(s, "alice", now=NOW)
        cluster.replace_inventory(s, [Node("a", 2, gpu_type("H100"))], fake=True, now=NOW)
        for t, name in ((0, "train-1"), (10, "train-2"), (20, "eval_1"), (30, "evalx1")):
            body = {"name": name, "command": ["python", "t.py"]}
            jobs.submit(s, body, alice, now=NOW + t)
    with db.read_session() as s:

        def names(**kw: object) -> list[str]:
            return [j.name for j in jobs.list_jobs(s, **kw)]  # type: ignore[arg-type]

        assert names(since=NOW + 10) == ["evalx1", "eval_1", "train-2"]
        assert names(name="train-*") == ["train-2", "train-1"]
        assert names(name="train-?", since=NOW + 5) == ["train-2"]
        assert names(name="eval_1") == ["eval_1"]  # "_" is itself, not any character
        assert names(name="eval?1") == ["evalx1", "eval_1"]
        assert names(name="*") == ["evalx1", "eval_1", "train-2", "train-1"]
        assert names(name="%") == []


def test_name_patterns_and_id_prefixes_match_case_sensitively(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's ``LIKE`` ignored case (``train-*`` listed ``Train-A``, an upper-case id
    prefix found the job), PostgreSQL's does not: both match case-sensitively now."""
    ids = iter(["abcdef012345", "abcdff012345"])
    monkeypatch.setattr(jobs, "new_job_id", lambda: next(ids))
    with db.session() as s:
        alice = users.create_user(s, "alice", now=NOW)
        cluster.replace_inventory(s, [Node("a", 2, gpu_type("H100"))], fake=True, now=NOW)
        for t, name in ((0, "Train-A"), (10, "train-b")):
            jobs.submit(s, {"name": name, "command": ["python", "t.py"]}, alice, now=NOW + t)
    with db.read_session() as s:

        def names(pattern: str) -> list[str]:
            return [j.name for j in jobs.list_jobs(s, name=pattern)]

        assert names("train-*") == ["train-b"]
        assert names("Train-?") == ["Train-A"]
        assert names("TRAIN-*") == []
        assert names("*-a") == []
        assert jobs.get_job(s, "abcde").id == "abcdef012345"
        for key in ("ABCDE", "ABCDEF01"):
            with pytest.raises(NotFoundError):
                jobs.get_job(s, key)


def test_danlu_ls_since_and_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs_cli, "console", Console(width=200))
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live:
        with live.client() as c:
            for name in ("sweep-a", "sweep-b", "other"):
                submit(c, spec(name, "pass"))
            assert c.get("/jobs", params={"since": "nan"}).status_code == 422
        flags = ["--url", live.url, "--token", live.token]

        def danlu(*args: str) -> tuple[int, str]:
            result = CliRunner().invoke(app, [*args, *flags])
            return result.exit_code, result.stdout + result.stderr

        code, out = danlu("ls", "--name", "sweep-*", "--since", "1h", "--json")
        assert code == 0, out
        assert [j["name"] for j in json.loads(out)] == ["sweep-b", "sweep-a"]
        code, out = danlu("ls", "--all", "--name", "other", "--json")
        assert code == 0 and [j["name"] for j in json.loads(out)] == ["other"]
        code, out = danlu("ls", "--since", "2999-01-01T00:00")  # nothing can be since then
        assert code == 2 and "is in the future" in out
        code, out = danlu("ls", "--since", "last week")
        assert code == 2 and "--since" in out
