"""Review 70 through the API and ``danlu metrics``: the records a restarted run went back over
are hidden from ``GET /jobs/{id}/metrics`` by default and listed with ``superseded=true``
(each then saying its ``attempt`` and whether it is ``superseded``), the cursor mode
(``after_id``) returns every new record with those fields, a run's token reports for its own
run, and an integer of more digits than Python converts is a 422 naming its field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

import pytest
from helpers import Live, live_server
from sqlalchemy import select, update
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.server.db import Database, Job, User
from danlu.server.services import users


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A server whose scheduling loops do not run: jobs stay where the test puts them."""
    with live_server(tmp_path_factory.mktemp("live70"), start_loops=False) as server:
        yield server


def _db(live: Live) -> Database:
    assert live.prepared is not None
    db: Database = live.prepared.app.state.danlu.db
    return db


def _job(live: Live) -> str:
    with live.client() as c:
        body = {"name": "m", "command": ["sleep", "1000"], "resources": {"gpus": 1}}
        response = c.post("/jobs", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["id"])


def _at(live: Live, job_id: str, attempt: int, moved_from: int | None = None) -> None:
    """The job as its ``attempt``-th start (or a move to it) left it."""
    with _db(live).session() as s:
        s.execute(
            update(Job).where(Job.id == job_id).values(attempt=attempt, moved_from=moved_from)
        )


def _post(live: Live, job_id: str, records: list[dict[str, Any]], token: str | None = None) -> None:
    with live.client(token) as c:
        response = c.post(f"/jobs/{job_id}/metrics", json={"metrics": records})
        assert response.status_code == 200, response.text


def _get(live: Live, job_id: str, **params: Any) -> list[dict[str, Any]]:
    with live.client() as c:
        response = c.get(f"/jobs/{job_id}/metrics", params=params)
        assert response.status_code == 200, response.text
        return cast(list[dict[str, Any]], response.json())


def _restarted(live: Live) -> str:
    """Attempt 1 reports steps 1-6 and fails; attempt 2 resumes from step 3's checkpoint."""
    job_id = _job(live)
    _at(live, job_id, 1)
    _post(live, job_id, [{"step": s, "loss": 10.0 - s} for s in range(1, 7)])
    _at(live, job_id, 2)
    _post(live, job_id, [{"step": s, "loss": 5.0 - s} for s in range(4, 8)])
    return job_id


def test_the_list_shows_each_step_once_after_a_restart(live: Live) -> None:
    job_id = _restarted(live)
    shown = _get(live, job_id)
    assert [(m["step"], m["loss"]) for m in shown] == [
        (1, 9.0),
        (2, 8.0),
        (3, 7.0),
        (4, 1.0),
        (5, 0.0),
        (6, -1.0),
        (7, -2.0),
    ]
    assert not {"attempt", "superseded"} & {k for m in shown for k in m}  # as before
    assert [m["step"] for m in _get(live, job_id, tail="true", limit=2)] == [6, 7]


def test_superseded_true_lists_every_record_and_says_whose_it_is(live: Live) -> None:
    job_id = _restarted(live)
    listed = _get(live, job_id, superseded="true")
    assert [(m["step"], m["attempt"], m["superseded"]) for m in listed] == [
        (1, 1, False),
        (2, 1, False),
        (3, 1, False),
        (4, 1, True),
        (4, 2, False),
        (5, 1, True),
        (5, 2, False),
        (6, 1, True),
        (6, 2, False),
        (7, 2, False),
    ]


def test_the_cursor_returns_every_new_record_with_its_attempt(live: Live) -> None:
    job_id = _job(live)
    _at(live, job_id, 1)
    _post(live, job_id, [{"step": s, "loss": 1.0} for s in (1, 2, 3)])
    with live.client() as c:
        first = c.get(f"/jobs/{job_id}/metrics", params={"after_id": 0, "limit": 2})
        cursor = first.headers["X-Danlu-Metrics-Cursor"]
        _at(live, job_id, 2)
        _post(live, job_id, [{"step": 2, "loss": 0.5}])
        rest = c.get(f"/jobs/{job_id}/metrics", params={"after_id": cursor}).json()
    assert [(m["step"], m["attempt"], m["superseded"]) for m in first.json()] == [
        (1, 1, False),
        (2, 1, False),  # superseded only once attempt 2 went back over it
    ]
    assert [(m["step"], m["attempt"], m["superseded"]) for m in rest] == [
        (3, 1, True),
        (2, 2, False),
    ]


def test_a_runs_token_reports_for_its_own_run_during_a_move(live: Live) -> None:
    """The job was moved to attempt 3; the run of attempt 2 still runs out its grace, and
    the job's only live run token is that run's: its records are attempt 2's."""
    job_id = _job(live)
    with _db(live).session() as s:
        owner = s.scalars(select(User).join(Job, Job.user_id == User.id).where(Job.id == job_id))
        token = users.issue_token(s, owner.one(), f"job {job_id}#2", job_id=job_id)
    _at(live, job_id, 3, moved_from=2)
    _post(live, job_id, [{"step": 9, "loss": 1.0}], token=token)
    _post(live, job_id, [{"step": 9, "note": 1}])  # the admin's: the job's current attempt
    listed = _get(live, job_id, superseded="true")
    assert [(m["step"], m["attempt"]) for m in listed] == [(9, 2), (9, 3)]


HUGE = "1" + "0" * 4300  # 4,301 digits: more than int() converts from text by default


@pytest.mark.parametrize(
    ("record", "field", "says"),
    [
        ('{"step": 1, "tokens": HUGE}', "metrics.1.tokens", "between -2**62 and 2**62"),
        ('{"step": 1, "tokens": -HUGE}', "metrics.1.tokens", "4,301 digits"),
        ('{"step": 1, "checkpoint_step": HUGE}', "metrics.1.checkpoint_step", "2**62"),
        ('{"step": HUGE}', "metrics.1.step", "integer step"),
        ('{"step": 1, "time": HUGE}', "metrics.1.time", "time.time()"),
    ],
    ids=["value", "negative-value", "checkpoint-step", "step", "time"],
)
def test_an_integer_of_thousands_of_digits_is_a_422_naming_its_field(
    live: Live, record: str, field: str, says: str
) -> None:
    job_id = _job(live)
    body = '{"metrics": [{"step": 0, "loss": 1.0}, ' + record.replace("HUGE", HUGE) + "]}"
    with live.client() as c:
        response = c.post(
            f"/jobs/{job_id}/metrics",
            content=body.encode(),
            headers={"Content-Type": "application/json"},
        )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field
    assert says in error["message"], error
    assert len(error["message"]) < 400  # the value is not quoted in full
    assert _get(live, job_id) == []


def test_a_huge_integer_elsewhere_in_the_body_is_a_422_too(live: Live) -> None:
    job_id = _job(live)
    with live.client() as c:
        response = c.post(
            f"/jobs/{job_id}/metrics",
            content=('{"metrics": [' + HUGE + "]}").encode(),
            headers={"Content-Type": "application/json"},
        )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "metrics.0"


def test_danlu_metrics_hides_them_and_shows_them_with_superseded(live: Live) -> None:
    job_id = _restarted(live)
    flags = ["--url", live.url, "--token", live.token]
    runner = CliRunner()
    shown = runner.invoke(app, ["metrics", job_id, *flags])
    assert shown.exit_code == 0, shown.output
    rows = [ln.replace("│", " ").split() for ln in shown.stdout.splitlines() if "│" in ln]
    assert [r[0] for r in rows] == ["1", "2", "3", "4", "5", "6", "7"]
    every = runner.invoke(app, ["metrics", job_id, "--superseded", *flags])
    assert every.exit_code == 0, every.output
    header = next(ln for ln in every.stdout.splitlines() if "step" in ln)
    assert header.replace("┃", " ").split() == ["step", "time", "attempt", "superseded", "loss"]
    rows = [ln.replace("│", " ").split() for ln in every.stdout.splitlines() if "│" in ln]
    assert [(r[0], r[2], r[3]) for r in rows] == [
        ("1", "1", "no"),
        ("2", "1", "no"),
        ("3", "1", "no"),
        ("4", "1", "yes"),
        ("4", "2", "no"),
        ("5", "1", "yes"),
        ("5", "2", "no"),
        ("6", "1", "yes"),
        ("6", "2", "no"),
        ("7", "2", "no"),
    ]
    raw = runner.invoke(app, ["metrics", job_id, "--superseded", "--json", *flags])
    assert [(m["step"], m["superseded"]) for m in json.loads(raw.stdout)][3:5] == [
        (4, True),
        (4, False),
    ]
