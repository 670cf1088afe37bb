"""Reading every metric record of a job by step, also of a step of more records than a page
holds (:data:`~danlu.server.services.metrics.MAX_READ`, lowered here): a page by step ends
inside such a step, and the next page read with ``after_step`` = that step skipped the rest
of it. A page's position (:class:`~danlu.server.services.metrics.StepPosition`, the API's
``X-Danlu-Metrics-Next``) goes on inside the step."""

from __future__ import annotations

import pytest
from test_metrics_step_bound_review90c import NOW, _job_with_steps

from danlu.core.errors import SpecError
from danlu.server.db import Database
from danlu.server.db.models import JobMetric
from danlu.server.services import metrics


def _every_page(db: Database, job_id: str, limit: int) -> list[list[tuple[int, int]]]:
    """The pages by step read each after the position of the one before, until one is empty
    (its position: where it began)."""
    pages: list[list[tuple[int, int]]] = []
    after: metrics.StepPosition | None = None
    with db.read_session() as s:
        while True:
            page = metrics.read_page(s, job_id, limit=limit, after=after)
            assert page.following is not None
            if not page.rows:
                assert page.following == (after or metrics.StepPosition(0, 0))
                return pages
            pages.append([(row.step, row.data["n"]) for row in page.rows])
            after = page.following


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize("limit", [2, 5])
def test_a_step_of_more_records_than_a_page_is_read_whole_page_by_page(
    seeded: Database, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    db = seeded
    monkeypatch.setattr(metrics, "MAX_READ", 5)
    steps = [0] * 12 + [1, 1, 2]
    job_id = _job_with_steps(db, steps)
    pages = _every_page(db, job_id, limit)
    assert [record for page in pages for record in page] == list(
        zip(steps, range(len(steps)), strict=True)
    )
    assert all(len(page) <= 5 for page in pages)  # the largest page, even inside a step
    assert pages[0] == [(0, n) for n in range(5)]  # step 0 cut at the largest page
    assert pages[-1][-1] == (2, 14)
    with db.read_session() as s:  # after_step as before: the rest of step 0 is skipped
        assert [
            row.data["n"] for row in metrics.list_metrics(s, job_id, after_step=0, limit=5)
        ] == [
            12,
            13,
            14,
        ]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_position_reads_on_with_after_step_and_from_the_tail(seeded: Database) -> None:
    db = seeded
    job_id = _job_with_steps(db, [1, 1, 2, 3])
    with db.read_session() as s:
        first = metrics.read_page(s, job_id, limit=1)  # step 1 comes whole
        assert [row.data["n"] for row in first.rows] == [0, 1]
        assert first.following is not None and first.following.text() == (f"1.{first.rows[-1].id}")
        after = metrics.step_position(first.following.text())
        assert after == first.following
        rest = metrics.read_page(s, job_id, after=after, after_step=2)
        assert [row.data["n"] for row in rest.rows] == [3]  # and of a step above 2 only
        empty = metrics.read_page(s, job_id, after_step=3)
        assert empty.rows == [] and empty.following == metrics.StepPosition(4, 0)
        tail = metrics.read_page(s, job_id, limit=1, tail=True)  # the position after the last
        assert tail.following == metrics.StepPosition(3, tail.rows[-1].id)


@pytest.mark.parametrize(
    "text", ["", "1", "1.", ".1", "-1.2", "1.2.3", "1,2", "١.٢", "1.2 ", "9" * 20 + ".1"]
)
def test_a_position_not_written_by_the_api_is_refused_naming_next(text: str) -> None:
    with pytest.raises(SpecError) as refused:
        metrics.step_position(text)
    assert refused.value.field == "next"
    assert "X-Danlu-Metrics-Next" in str(refused.value)


def test_a_position_with_the_tail_or_by_arrival_is_refused_naming_next(
    sqlite_db: Database,
) -> None:
    with sqlite_db.read_session() as s:
        for mode in ({"tail": True}, {"after_id": 0}):
            with pytest.raises(SpecError) as refused:
                metrics.list_metrics(s, "j", after=metrics.StepPosition(0, 0), **mode)
            assert refused.value.field == "next"


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_record_committing_late_inside_a_step_is_not_passed_over(seeded: Database) -> None:
    """On PostgreSQL ids are taken at insert: record 1 of step 0, still being stored, is
    below record 2, stored and visible. A page read then holds neither (none above a record
    that can still commit), so its position does not pass record 1; both come next."""
    job_id = _job_with_steps(seeded, [])
    with seeded.session() as first:
        first.add(JobMetric(job_id=job_id, step=0, time=NOW, data={"n": 1}, attempt=0))
        first.flush()  # the id is taken; the row is not committed
        with seeded.session() as second:
            second.add(JobMetric(job_id=job_id, step=0, time=NOW, data={"n": 2}, attempt=0))
        with seeded.read_session() as s:
            page = metrics.read_page(s, job_id)
            assert page.rows == []
            before = page.following
    with seeded.read_session() as s:
        page = metrics.read_page(s, job_id, after=before)
        assert [row.data["n"] for row in page.rows] == [1, 2]
