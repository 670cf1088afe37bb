"""Metric ingestion: one record the API refuses (a list value, a time in
milliseconds, a bad step, ...) lost every record of danlu.train's flush: the server refuses
the whole batch (422 naming ``metrics.<i>``, nothing stored; that contract stays) and the
reporter dropped the whole request. The reporter now leaves such records out before it sends,
by the checks the server runs (:mod:`danlu.core.metric_record`), and the valid ones are
stored."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any, cast

import pytest
from helpers import Live, live_server

from danlu.core.errors import SpecError
from danlu.core.metric_record import MAX_RECORD_BYTES
from danlu.server.db import Database
from danlu.server.services import jobs, metrics, users
from danlu.train.report import MetricsReporter

NOW = 1_000_000.0

BAD: dict[str, tuple[Any, str]] = {
    # id: (the odd record, the field the server names after ``metrics.<i>``)
    "list-value": ({"step": 6, "loss": 0.1, "lr_groups": [0.1, 0.01]}, "lr_groups"),
    "nested-value": ({"step": 6, "opt": {"lr": 0.1}}, "opt"),
    "integer-beyond-2-62": ({"step": 6, "tokens": 2**62 + 1}, "tokens"),
    "time-in-milliseconds": ({"step": 6, "time": 1.7e12, "loss": 0.1}, "time"),
    "time-not-a-number": ({"step": 6, "time": "now"}, "time"),
    "string-with-nul": ({"step": 6, "tag": "a\0b"}, "tag"),
    "lone-surrogate": ({"step": 6, "tag": "\ud800"}, "tag"),
    "name-with-nul": ({"step": 6, "a\0b": 1}, ""),
    "record-over-16-kib": ({"step": 6, "blob": "x" * (MAX_RECORD_BYTES + 1)}, ""),
    "negative-step": ({"step": -1, "loss": 0.1}, "step"),
    "float-step": ({"step": 1.5}, "step"),
    "bool-step": ({"step": True}, "step"),
    "missing-step": ({"loss": 0.1}, "step"),
    "step-beyond-2-62": ({"step": 2**62 + 1}, "step"),
    "negative-checkpoint-step": ({"step": 6, "checkpoint_step": -1}, "checkpoint_step"),
    "not-an-object": ([1, 2], ""),
}


def _valid(step: int) -> dict[str, Any]:
    return {"step": step, "loss": 1.0 / step}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A server whose scheduling loops do not run: the jobs stay pending (metrics are
    taken all the same)."""
    with live_server(tmp_path_factory.mktemp("live66"), start_loops=False) as server:
        yield server


def _job(live: Live) -> str:
    with live.client() as c:
        body = {"name": "rep", "command": ["sleep", "1000"], "resources": {"gpus": 1}}
        response = c.post("/jobs", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["id"])


def _stored(live: Live, job_id: str) -> list[dict[str, Any]]:
    with live.client() as c:
        response = c.get(f"/jobs/{job_id}/metrics")
        assert response.status_code == 200, response.text
        return cast(list[dict[str, Any]], response.json())


def test_the_reviewers_case_stores_the_five_valid_records(live: Live) -> None:
    job_id = _job(live)
    reporter = MetricsReporter(
        url=f"{live.url}/api/v1/jobs/{job_id}/metrics", token=live.token, interval_s=3600
    )
    for step in range(1, 6):
        reporter.report(_valid(step))
    reporter.report({"step": 6, "loss": 0.1, "lr_groups": [0.1, 0.01]})
    reporter.flush()
    assert (reporter.sent, reporter.dropped, reporter.errors) == (5, 1, 0)
    assert [(m["step"], m["loss"]) for m in _stored(live, job_id)] == [
        (s, 1.0 / s) for s in range(1, 6)
    ]


@pytest.mark.parametrize(("record", "field"), list(BAD.values()), ids=list(BAD))
def test_the_reporter_leaves_out_only_the_record_the_server_would_refuse(
    live: Live, record: Any, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = _job(live)
    reporter = MetricsReporter(
        url=f"{live.url}/api/v1/jobs/{job_id}/metrics", token=live.token, interval_s=3600
    )
    with caplog.at_level(logging.WARNING, logger="danlu.train"):
        for step in (1, 2):
            reporter.report(_valid(step))
        reporter.report(record)
        for step in (3, 4):
            reporter.report(_valid(step))
        reporter.flush()
    assert (reporter.sent, reporter.dropped, reporter.errors) == (4, 1, 0)
    assert [m["step"] for m in _stored(live, job_id)] == [1, 2, 3, 4]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "left out" in warnings[0], warnings
    assert field in warnings[0]


@pytest.mark.parametrize(("record", "field"), list(BAD.values()), ids=list(BAD))
def test_the_server_still_refuses_a_mixed_batch_and_stores_none_of_it(
    live: Live, record: Any, field: str
) -> None:
    job_id = _job(live)
    body = {"metrics": [_valid(1), record, _valid(2)]}
    with live.client() as c:
        response = c.post(
            f"/jobs/{job_id}/metrics",
            content=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "SpecError"
    assert error["field"] == (f"metrics.1.{field}" if field else "metrics.1")
    assert _stored(live, job_id) == []


def test_ingest_refuses_a_mixed_batch_with_a_plain_spec_error(seeded: Database) -> None:
    """The service raises :class:`SpecError` itself (its class name is the error type of
    the API's 422) and stores nothing of the batch, its step and checkpoint included."""
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        job_id = jobs.submit(s, {"name": "m", "command": ["true"]}, alice, now=NOW).id
    batch = [{"step": 1, "checkpoint_step": 1}, {"step": 2, "time": 1.7e12}]
    with pytest.raises(SpecError) as err, seeded.session() as s:
        metrics.ingest(s, jobs.get_job(s, job_id), batch, NOW)
    assert type(err.value) is SpecError and err.value.field == "metrics.1.time"
    assert "milliseconds" in err.value.message
    with seeded.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert metrics.list_metrics(s, job_id) == []
        assert (job.last_step, job.checkpoint_step) == (None, None)


def test_the_checks_the_reporter_runs_are_the_servers(live: Live) -> None:
    """A record at the edges the server takes (16 KiB of JSON, the year 9999, 2**62) is
    sent, not left out."""
    job_id = _job(live)
    reporter = MetricsReporter(
        url=f"{live.url}/api/v1/jobs/{job_id}/metrics", token=live.token, interval_s=3600
    )
    # {"blob": "..."} is 12 bytes of JSON around the string
    edge = {"step": 2**62, "time": 253_402_300_799.0, "blob": "x" * (MAX_RECORD_BYTES - 12)}
    reporter.report(edge)
    reporter.report({"step": 0, "checkpoint_step": 2**62, "n": -(2**62), "ok": None})
    reporter.flush()
    assert (reporter.sent, reporter.dropped, reporter.errors) == (2, 0, 0)
    assert [m["step"] for m in _stored(live, job_id)] == [0, 2**62]
