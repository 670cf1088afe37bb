"""Every table of the CLI into a pipe or a file, one row a line, as wide as its cells: at
the 80 columns Rich assumes there, ``danlu ls | grep PENDING`` missed a job whose reason
folded onto a second line, ``danlu nodes``, ``danlu webhook ls``, the admin tables and
``danlu show`` folded a long cell (a reason, a URL, a list of jobs or members, a command)
or dropped columns; a long line (``danlu why``) folded too. On a terminal, fitted as
before; into a pipe whole whatever ``COLUMNS`` says.

The commands run against canned replies (``cli_fake_api.serve_replies``), printing on the
CLI's own console (:func:`danlu.cli.markup.console`), whose stdout is the runner's.
"""

from __future__ import annotations

from typing import Any

import pytest
from cli_fake_api import invoke, serve_replies
from rich.console import Console

from danlu.cli import jobs as jobs_cli
from danlu.cli.main import app
from danlu.cli.markup import console as cli_console

GiB = 1024**3
REASON = (
    "waiting for 4 GPU(s) with 80.0GiB free each: node-a has 2 free, node-b is cordoned "
    "for maintenance (disk), node-c holds jobs of a higher priority"
)
"""A pending job's reason far longer than 80 columns."""
NAME = "resnet50-imagenet-lr0.1-batch256-warmup5"
"""A job name longer than the jobs table's 24 columns for a name."""


def _job(number: int, state: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"{number:012x}",
        "name": NAME,
        "user": "alice",
        "project": "vision-research",
        "state": state,
        "priority": 10,
        "gpus": 4,
        "restarts": 0,
        "submitted_at": 1_000.0,
        "spec": {"command": ["python", "train.py", "--config", "configs/resnet50.yaml"]},
        **extra,
    }


JOBS = [
    _job(1, "PENDING", pending_reason=REASON),
    _job(2, "RUNNING", allocation=[{"node": f"node-{i}", "gpu": i} for i in range(8)]),
    _job(3, "FAILED", exit_code=1, end_reason="out of memory (exit code 1); out of restarts"),
]


def _pipe(monkeypatch: pytest.MonkeyPatch, replies: dict[str, Any]) -> None:
    """Commands answered from ``replies``, printing on the CLI's console into the runner's
    stdout: a pipe."""
    serve_replies(monkeypatch, replies)
    monkeypatch.setattr(jobs_cli, "console", cli_console())


def _row(out: str, key: str) -> str:
    """The one line of ``out`` holding ``key`` (a row is never split)."""
    rows = [line for line in out.splitlines() if key in line]
    assert len(rows) == 1, out
    return rows[0]


def test_ls_into_a_pipe_is_a_job_a_line_with_every_column(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _pipe(monkeypatch, {"/jobs": JOBS})
    code, out, err = invoke(app, "ls")
    assert (code, err) == (0, "")
    pending = _row(out, JOBS[0]["id"])
    assert REASON in pending and NAME in pending  # `danlu ls | grep PENDING` sees it whole
    assert "PENDING" in pending and "alice" in pending  # user left out at 80 columns before
    running = _row(out, JOBS[1]["id"])
    assert ", ".join(f"node-{i}:{i}" for i in range(8)) in running
    assert "out of memory (exit code 1); out of restarts" in _row(out, JOBS[2]["id"])
    assert "…" not in out
    header = _row(out, "where / why")
    assert all(column in header for column in ("user", "prio", "restarts"))


def test_ls_on_a_terminal_is_fitted_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    _pipe(monkeypatch, {"/jobs": JOBS})
    monkeypatch.setattr(jobs_cli, "console", Console(width=80, force_terminal=True))
    code, out, _ = invoke(app, "ls")
    assert code == 0
    assert not any(REASON in line for line in out.splitlines())  # folded into its column
    assert "alice" not in out  # the user column left out under 120 columns


@pytest.mark.parametrize("columns", ["80", "100"])
def test_columns_set_does_not_fold_a_pipe(monkeypatch: pytest.MonkeyPatch, columns: str) -> None:
    """``COLUMNS`` is set where the output is no terminal (``watch``, pytest-xdist's
    workers): Rich takes it as the width, the table is printed whole all the same."""
    monkeypatch.setenv("COLUMNS", columns)
    _pipe(monkeypatch, {"/jobs": JOBS})  # the console made after: Rich reads COLUMNS then
    code, out, _ = invoke(app, "ls")
    assert code == 0
    assert REASON in _row(out, JOBS[0]["id"])


def test_ls_into_a_pipe_is_grepped_and_cut_by_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """``danlu ls | grep -c PENDING`` counts jobs, and a row's cells split on ``│``."""
    _pipe(monkeypatch, {"/jobs": JOBS})
    out = invoke(app, "ls")[1]
    assert sum("PENDING" in line for line in out.splitlines()) == 1
    cells = [cell.strip() for cell in _row(out, JOBS[0]["id"]).split("│")[1:-1]]
    assert cells[0] == JOBS[0]["id"] and cells[1] == NAME and cells[-1] == REASON


NODES = [
    {
        "name": "node-with-a-long-name-0",
        "state": "cordoned",
        "cordon_reason": "maintenance window for the disks and the network cards, back on Monday",
        "gpu_type": "A100-80GB",
        "gpus": [
            {
                "index": 0,
                "memory": 80 * GiB,
                "allocated_memory": 40 * GiB,
                "allocated_milli": 500,
                "jobs": [f"{n:012x}" for n in range(10, 16)],
            }
        ],
    }
]


def test_nodes_into_a_pipe_are_a_gpu_a_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _pipe(monkeypatch, {"/cluster/nodes": NODES})
    code, out, err = invoke(app, "nodes")
    assert (code, err) == (0, "")
    row = _row(out, "00000000000a")
    assert ", ".join(f"{n:012x}" for n in range(10, 16)) in row  # every job, one line
    assert NODES[0]["cordon_reason"] in row
    assert "40.0GiB" in row


OS_USER = "alice-with-a-long-os-account-name-on-the-cluster"
LONG_URL = "https://hooks.example.com/services/T00000000/B00000000/" + "x" * 40
TABLES = [
    (
        ["webhook", "ls"],
        "/webhooks",
        [
            {
                "id": "wh1",
                "url": LONG_URL,
                "states": ["FAILED", "SUCCEEDED", "CANCELLED"],
                "project": "vision-research",
                "pending": 0,
                "delivered": 3,
                "failed": 1,
                "last_error": "connection refused by hooks.example.com after 3 attempts",
            }
        ],
        ["wh1", LONG_URL, "FAILED,SUCCEEDED,CANCELLED", "connection refused by hooks"],
    ),
    (
        ["user", "ls"],
        "/users",
        [{"name": "alice-with-a-long-name", "role": "admin", "os_user": OS_USER, "quota_gpus": 8}],
        ["alice-with-a-long-name", "admin", OS_USER],
    ),
    (
        ["project", "ls"],
        "/projects",
        [
            {
                "name": "vision",
                "priority": 5,
                "quota_gpus": 16,
                "quota_gpu_memory": 640 * GiB,
                "share": 2,
                "gpus_held": 4,
                "recent_gpus": 3.5,
                "members": [f"member-number-{n}" for n in range(8)],
            }
        ],
        ["vision", ", ".join(f"member-number-{n}" for n in range(8))],
    ),
    (
        ["sweep", "ls"],
        "/sweeps",
        [
            {
                "id": "sw1",
                "name": "a-sweep-with-a-name-far-longer-than-its-column-would-be",
                "user": "alice",
                "state": "RUNNING",
                "submitted": 3,
                "total": 12,
                "metric": "validation_top1_accuracy",
                "goal": "maximize",
            }
        ],
        ["sw1", "a-sweep-with-a-name-far-longer", "validation_top1_accuracy (maximize)"],
    ),
    (
        ["usage"],
        "/usage",
        [
            {
                "project": "a-project-with-a-long-name-for-usage",
                "user": "a-user-with-a-long-name-too",
                "gpu_hours": 12.5,
                "gpu_memory_gib_hours": 800.0,
                "jobs": 3,
            }
        ],
        ["a-project-with-a-long-name-for-usage", "a-user-with-a-long-name-too", "12.50"],
    ),
]


@pytest.mark.parametrize(
    ("command", "path", "reply", "whole"), TABLES, ids=[" ".join(t[0]) for t in TABLES]
)
def test_admin_and_listing_tables_into_a_pipe_are_a_row_a_line(
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    path: str,
    reply: list[dict[str, Any]],
    whole: list[str],
) -> None:
    _pipe(monkeypatch, {path: reply})
    code, out, err = invoke(app, *command)
    assert (code, err) == (0, ""), out
    row = _row(out, whole[0])
    assert all(cell in row for cell in whole), out
    assert "…" not in out


def test_show_into_a_pipe_has_its_command_and_reasons_on_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = _job(1, "PENDING", pending_reason=REASON)
    job["spec"]["command"] = ["python", "train.py", *(f"--option-{n}=value-{n}" for n in range(8))]
    event = {"id": 1, "time": 1_000.0, "old": "RUNNING", "new": "PENDING", "reason": REASON}
    _pipe(monkeypatch, {f"/jobs/{job['id']}": job, f"/jobs/{job['id']}/events": [event]})
    code, out, err = invoke(app, "show", job["id"])
    assert (code, err) == (0, "")
    assert REASON in _row(out, "pending")
    assert " ".join(f"--option-{n}=value-{n}" for n in range(8)) in _row(out, "command")
    assert REASON in _row(out, "RUNNING")  # the events table's row


def test_a_long_line_into_a_pipe_is_not_folded(monkeypatch: pytest.MonkeyPatch) -> None:
    """``danlu why JOB | grep``: the reason on the job's line."""
    reply = {"id": "000000000001", "state": "PENDING", "reason": REASON}
    _pipe(monkeypatch, {"/jobs/000000000001/why": reply})
    code, out, _ = invoke(app, "why", "000000000001")
    assert code == 0
    assert out == f"000000000001 PENDING: {REASON}\n"


def test_top_once_into_a_pipe_is_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    _pipe(monkeypatch, {"/cluster/nodes": NODES, "/jobs": JOBS})
    code, out, _ = invoke(app, "top", "--once")
    assert code == 0
    assert REASON in _row(out, JOBS[0]["id"])
    assert ", ".join(f"{n:012x}" for n in range(10, 16)) in _row(out, "00000000000a")


def test_json_into_a_pipe_is_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    _pipe(monkeypatch, {"/jobs": JOBS})
    code, out, _ = invoke(app, "ls", "--json")
    assert code == 0
    assert f'"pending_reason": "{REASON}"' in out
