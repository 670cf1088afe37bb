"""A RUNNING job whose run the executor has not launched (the API's ``launched`` false: its
cluster cannot be reached, or the executor's next pass has not come yet) reads ``RUNNING (not
launched)`` in ``danlu ls``, ``danlu show`` and ``danlu top``: they showed RUNNING on its
GPUs as if it ran, and its users looked for output that never came. A job launched, or from
a server older than the field, reads RUNNING as before. Against the in-memory API of
``cli_fake_api``."""

from __future__ import annotations

import json

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands
from rich.console import Console

from danlu.cli import main as main_cli
from danlu.cli.top import jobs_table

APP = jobs_app()
UNREACHED = (
    "not launched: the cluster cannot be reached (sbatch: error: Unable to contact slurm "
    "controller): it keeps its GPUs and is launched once the cluster answers"
)
"""The ``pending_reason`` the server gives such a job while Slurm's controller is down."""
SHARE = {"node": "node-0", "gpu": 0, "milli": 1000, "memory": 80 * 1024**3}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


def _placed(fake: FakeApi, **extra: object) -> str:
    job = fake.add_job(
        "placed",
        "RUNNING",
        launched=False,
        allocation=[SHARE],
        pending_reason=UNREACHED,
        started_at=1500.0,
        **extra,
    )
    return str(job["id"])


def _row(out: str, job_id: str) -> str:
    (line,) = [line for line in out.splitlines() if job_id in line]
    return line


def test_ls_and_top_say_a_placed_job_is_not_launched(fake: FakeApi) -> None:
    placed = _placed(fake)
    runs = fake.add_job("runs", "RUNNING", launched=True, allocation=[SHARE | {"gpu": 1}])["id"]
    older = fake.add_job("older", "RUNNING", allocation=[SHARE | {"gpu": 1}])["id"]  # no field
    code, out, err = invoke(APP, "ls")
    assert code == 0, err
    assert "RUNNING (not launched)" in _row(out, placed) and "node-0:0" in _row(out, placed)
    for job_id in (runs, older):
        assert "RUNNING" in _row(out, job_id) and "not launched" not in _row(out, job_id)
    code, out, err = invoke(APP, "ls", "--state", "RUNNING", "--json")  # the state filter
    assert code == 0, err
    listed = {job["id"]: job for job in json.loads(out)}
    assert listed[placed]["launched"] is False and listed[placed]["state"] == "RUNNING"
    code, out, err = invoke(main_cli.app, "top", "--once")
    assert code == 0, err
    (row,) = [line for line in out.splitlines() if placed in line and "RUNNING" in line]
    assert "RUNNING (not launched)" in row  # its row of the jobs, not of the GPUs
    assert "RUNNING 3" in out  # counted as RUNNING: it holds GPUs


def test_show_says_it_and_why(fake: FakeApi) -> None:
    placed = _placed(fake)
    code, out, err = invoke(APP, "show", placed)
    assert code == 0, err
    lines = out.splitlines()
    assert any(line.split() == ["state", "RUNNING", "(not", "launched)"] for line in lines), out
    assert any(line.split()[:1] == ["pending"] and UNREACHED in line for line in lines), out


def test_a_launched_field_of_the_wrong_type_is_named(fake: FakeApi) -> None:
    job_id = fake.add_job("odd", "RUNNING", launched="no", allocation=[SHARE])["id"]
    code, out, err = invoke(APP, "ls")
    assert code == 2
    assert f"for field launched of job {job_id}" in err, err
    assert "RUNNING" in _row(out, job_id) and "not launched" not in _row(out, job_id)


def _terminal(width: int) -> Console:
    return Console(width=width, force_terminal=True, color_system=None, record=True)


def test_on_a_narrow_terminal_the_note_goes_under_the_state() -> None:
    """At 80 columns, ``RUNNING (not launched)`` on one line made the table too wide: a line
    per job for every job. The note goes on a second line of the state's cell there; on one
    line where the table has room."""
    job = {
        "id": "0a1b2c3d4e5f",
        "name": "train-resnet",
        "state": "RUNNING",
        "launched": False,
        "gpus": 1,
        "gpu_memory": 80 * 1024**3,
        "allocation": [SHARE],
        "submitted_at": 100.0,
    }
    other = job | {"id": "0a1b2c3d4e60", "name": "eval", "state": "PREEMPTING", "launched": True}
    narrow = _terminal(80)
    narrow.print(jobs_table([job, other], now=200.0))
    lines = narrow.export_text().splitlines()
    header = [cell.strip() for cell in lines[1].split("┃")[1:-1]]
    assert header == ["id", "name", "state", "gpus", "age", "where / why"]  # a table
    (at,) = [i for i, line in enumerate(lines) if "0a1b2c3d4e5f" in line]
    assert lines[at].split("│")[3].strip() == "RUNNING"
    assert lines[at + 1].split("│")[3].strip() == "not launched"
    wide = _terminal(160)
    wide.print(jobs_table([job, other], now=200.0))
    (row,) = [line for line in wide.export_text().splitlines() if "0a1b2c3d4e5f" in line]
    assert row.split("│")[4].strip() == "RUNNING (not launched)"
