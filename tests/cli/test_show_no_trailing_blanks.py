"""``danlu show JOB | ...`` padded every line of its table (which has no borders) to the
width of its widest, a long pending reason or command: lines ending in tens of blanks in a
pipe or a file. Into a pipe no line of the CLI's tables ends in a blank now; on a terminal
the table is printed as before."""

from __future__ import annotations

import pytest
from cli_fake_api import invoke, serve_replies
from rich.console import Console

from danlu.cli import jobs as jobs_cli
from danlu.cli.main import app
from danlu.cli.markup import console as cli_console

JOB_ID = "000000000001"
REASON = "waiting for 4 GPU(s): node-a has 2 free, node-b is cordoned for maintenance (disk)"
JOB = {
    "id": JOB_ID,
    "name": "resnet",
    "user": "alice",
    "project": "vision",
    "state": "PENDING",
    "priority": 10,
    "gpus": 4,
    "restarts": 0,
    "submitted_at": 1_000.0,
    "pending_reason": REASON,
    "spec": {"command": ["python", "train.py"]},
}
EVENT = {"id": 1, "time": 1_000.0, "old": None, "new": "PENDING", "reason": "submitted"}
REPLIES = {f"/jobs/{JOB_ID}": JOB, f"/jobs/{JOB_ID}/events": [EVENT]}


def test_show_into_a_pipe_ends_no_line_in_blanks(monkeypatch: pytest.MonkeyPatch) -> None:
    serve_replies(monkeypatch, REPLIES)
    monkeypatch.setattr(jobs_cli, "console", cli_console())
    code, out, err = invoke(app, "show", JOB_ID)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [line for line in lines if line != line.rstrip()] == [], out
    (name,) = [line for line in lines if line.split()[:1] == ["name"]]
    assert name.split() == ["name", "resnet"]
    assert any(REASON in line for line in lines) and any("submitted" in line for line in lines)
    assert out.endswith("┘\n"), out  # the events table's last line whole


def test_show_on_a_terminal_is_printed_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    serve_replies(monkeypatch, REPLIES)
    monkeypatch.setattr(jobs_cli, "console", Console(width=200, force_terminal=True))
    code, out, _ = invoke(app, "show", JOB_ID)
    assert code == 0
    (name,) = [line for line in out.splitlines() if "resnet" in line]
    assert name.endswith(" ")  # Rich's padding of the column, as ever
