"""A metric record's optional ``time`` sent as JSON null is absent, as a null ``rollback``
is: the record is stored at the server's time (it was refused with a 422 naming
``metrics.N.time``). A ``time`` that is not a number still names that field."""

from __future__ import annotations

import pytest

from conftest import NOW
from danlu.core.errors import SpecError
from danlu.server.db import Database
from danlu.server.services import jobs, metrics, users


def _job(db: Database) -> str:
    with db.session() as s:
        alice = users.get_user(s, "alice")
        return jobs.submit(s, {"name": "m", "command": ["true"]}, alice, now=NOW).id


def test_a_null_time_is_the_servers_time_as_a_null_rollback_is_absent(seeded: Database) -> None:
    job_id = _job(seeded)
    with seeded.session() as s:
        job = jobs.get_job(s, job_id)
        records = [{"step": 1, "time": None, "loss": 0.5}, {"step": 2, "rollback": None}]
        assert metrics.ingest(s, job, records, now=NOW + 7) == 2
    with seeded.read_session() as s:
        stored = [(r.step, r.time, r.data) for r in metrics.list_metrics(s, job_id)]
    # stored at the server's time, and no null "time" kept among the values
    assert stored == [(1, NOW + 7, {"loss": 0.5}), (2, NOW + 7, {})]


def test_a_time_that_is_not_a_number_still_names_the_field(seeded: Database) -> None:
    job_id = _job(seeded)
    with seeded.session() as s, pytest.raises(SpecError) as refused:
        metrics.ingest(s, jobs.get_job(s, job_id), [{"step": 1, "time": "now"}], now=NOW)
    assert refused.value.field == "metrics.0.time"


def test_the_shared_check_reads_a_null_time_as_absent_for_the_reporter_too() -> None:
    # danlu.train's reporter runs the same check before it sends: a record the server takes
    # must not be left out there
    from danlu.core.metric_record import check_record

    checked = check_record({"step": 3, "time": None, "loss": 1.0}, "metrics.0", NOW + 5)
    assert (checked.step, checked.time) == (3, NOW + 5)
    assert "time" not in checked.data
