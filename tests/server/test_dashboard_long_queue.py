"""The dashboard's unfinished jobs past the 1,000 that one list returns: it read the newest
1,000 pending jobs and showed the 200 oldest of those as "the pending ones of highest
priority, oldest first", saying "of more than 1000": the jobs that had waited longest were
left out unsaid, and how many jobs there were was not said. Now it asks the API for the
pending jobs nearest to a start (``order=queue``) and how many there are (``count=true``),
and says how many of how many it shows. In a real browser (``test_dashboard``'s fixtures; a
server without its loops, so the queue stays as made), skipped without ``/usr/bin/chromium``
unless ``DANLU_TEST_REQUIRE_BROWSER`` is set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_dashboard
import test_dashboard_not_launched_notes
from helpers import Live, live_server

from danlu.core.spec import parse_spec
from danlu.server.services import jobs, submission, users
from danlu.server.services.dependencies import Verdict

browser = test_dashboard.browser
page = test_dashboard.page  # a tab on the dashboard; no script error, no file missing
scripts = test_dashboard_not_launched_notes.scripts  # a blank page with the Jobs table's scripts

QUEUED = 1050
"""More pending jobs than one list returns (1,000)."""


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    """A server without its loops: the jobs stay as submitted."""
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as server:
        yield server


def test_a_queue_past_one_list_shows_its_head_and_says_how_many(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    assert live.prepared is not None
    db = live.prepared.app.state.danlu.db
    with db.session() as s:  # admitted once and queued, as a job array's tasks are
        admin = users.get_user(s, "admin")
        spec = parse_spec({"name": "q", "command": ["true"]})
        admitted = submission.admit(s, spec, admin, now=1000.0)
        queued = [
            submission.queue(
                s,
                admitted,
                f"{i:012x}",
                spec.model_copy(update={"name": f"q{i}"}),
                depends_on=[],
                waiting=Verdict(None, ""),
                now=1000.0 + i,
            )
            for i in range(QUEUED - 1)
        ]
        submission.announce(s, admitted, queued, 1000.0)
        made = [job.id for job in queued]
        urgent = {"name": "urgent", "command": ["true"], "priority": 9}
        made.append(jobs.submit(s, urgent, admin, now=1000.0 + QUEUED).id)
    page.fill("#token", live.token)
    page.click("#login button")
    expect(page.locator("#jobs-note")).to_have_text(
        "showing 200 of 1,050 unfinished jobs: the pending ones of highest priority, oldest "
        "first (danlu ls --all --state PENDING lists every pending one)"
    )
    rows = page.locator("#jobs tbody tr")
    expect(rows).to_have_count(200)
    shown = set(rows.evaluate_all("(rows) => rows.map((row) => row.dataset.job)"))
    # the newest job, of the highest priority, and the 199 that waited longest
    assert shown == {made[-1], *made[:199]}


def test_the_note_says_what_is_cut(scripts: Any) -> None:
    """``unfinishedNote`` of ``jobs.js`` with running jobs, all of them shown or not."""

    def note(shown: int, active: tuple[int, int], queued: int, pending: int) -> str:
        lists = [{"rows": [{}] * active[0], "count": active[1]}, {"rows": [], "count": pending}]
        said: str = scripts.evaluate(
            "([shown, active, queued, pending]) => unfinishedNote(shown, active, queued, pending)",
            [shown, lists[0], queued, lists[1]],
        )
        return said

    assert note(200, (1, 1), 199, 1050) == (
        "showing 200 of 1,051 unfinished jobs: every running one, and 199 of the 1,050 "
        "pending, those of highest priority, oldest first (danlu ls --all --state PENDING "
        "lists every pending one)"
    )
    assert note(1000, (1000, 1200), 0, 3) == (
        "showing 1,000 of 1,203 unfinished jobs: the newest 1,000 of 1,200 running, and none "
        "of the 3 pending (danlu ls --all lists every job)"
    )
