"""``danlu ls`` (and ``danlu show``) shows an elastic job's GPU range while it holds no
GPUs (``1..2`` for ``--gpus 1..2``), and the GPUs it holds while it holds some: the API's
``gpus`` is the range's least while the job waits, so the table said ``1`` for a job that
may get 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_real_api import real_api
from typer.testing import CliRunner

from danlu.cli import top
from danlu.cli.main import app

HELLO = """\
name: stretchy
command: [python, -c, "print('hello')"]
"""
ELASTIC = {"resources": {"gpus": {"min": 1, "max": 2}}}


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The real API app (no scheduling loop: a job stays PENDING); yields a spec file."""
    with real_api(tmp_path, monkeypatch):
        spec = tmp_path / "job.yaml"
        spec.write_text(HELLO)
        yield spec


def _run(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _gpus_cell(ls_output: str, job_id: str) -> str:
    """The ``gpus`` cell of the job's row in ``danlu ls``'s table."""
    lines = [line for line in ls_output.splitlines() if line.strip()]
    (header,) = [line for line in lines if " gpus " in line]
    (row,) = [line for line in lines if job_id in line]
    column = [cell.strip() for cell in header[1:-1].split("┃")].index("gpus")
    return row[1:-1].split("│")[column].strip()


def test_a_pending_elastic_job_shows_its_range(server: Path) -> None:
    job = json.loads(_run("submit", str(server), "--gpus", "1..2", "--json"))
    assert job["state"] == "PENDING" and job["gpus"] == 1  # the API's: the range's least
    assert _gpus_cell(_run("ls"), job["id"]) == "1..2"
    assert "1..2" in _run("show", job["id"])


def test_a_fixed_count_is_shown_as_before(server: Path) -> None:
    job = json.loads(_run("submit", str(server), "--gpus", "1", "--json"))
    assert _gpus_cell(_run("ls"), job["id"]) == "1"


def _job(**extra: Any) -> dict[str, Any]:
    return {"gpus": 1, "gpu_memory": None, "allocation": [], "spec": ELASTIC} | extra


def test_an_elastic_job_holding_gpus_shows_those_it_holds() -> None:
    held = [{"node": "n", "gpu": g, "milli": 1000, "memory": 0} for g in (0, 1)]
    assert top.gpus_of(_job(state="RUNNING", gpus=2, allocation=held)) == "2"
    assert top.gpus_of(_job(state="RUNNING", gpus=1, allocation=held[:1])) == "1"
    assert top.gpus_of(_job(state="PENDING")) == "1..2"
    assert top.gpus_of(_job(state="SUCCEEDED")) == "1..2"  # holds none: what it asked


@pytest.mark.parametrize(
    "gpus",
    [{"min": 2, "max": 2}, {"min": True, "max": 2}, {"min": "1", "max": "2"}, 3, None],
)
def test_anything_but_a_range_leaves_the_api_s_count(gpus: Any) -> None:
    assert top.gpus_of(_job(spec={"resources": {"gpus": gpus}})) == "1"
