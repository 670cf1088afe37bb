"""The dashboard's Jobs table and ``danlu ls`` write the same note after a job's state, for
each state a job has, launched or not (or from a server older than the field), held or not:
the dashboard said ``RUNNING (held)`` of a held job whose run launched, ``danlu ls`` plain
``RUNNING``. The dashboard's ``stateNote`` (``jobs.js``) run in Chromium on a blank page (no
server), beside :func:`danlu.cli.job_table.jobs_table`'s state cell; skipped without
``/usr/bin/chromium`` unless ``DANLU_TEST_REQUIRE_BROWSER`` is set. Jobs waiting for a
dependency are left out: ``danlu ls`` says that in its why only."""

from __future__ import annotations

from importlib import resources
from itertools import product
from typing import Any

import test_dashboard

from danlu.cli.job_table import jobs_table

browser = test_dashboard.browser

SCRIPTS = ("api.js", "common.js", "jobs.js")
"""The page's scripts that ``stateNote`` needs, in the page's order."""
STATES = ("PENDING", "RUNNING", "PREEMPTING", "RESTARTING", "SUCCEEDED", "FAILED", "CANCELLED")


def _cases() -> list[dict[str, Any]]:
    """Each state, launched true, false or not sent, held or not."""
    cases = []
    for state, launched, held_at in product(STATES, (True, False, None), (None, 150.0)):
        job: dict[str, Any] = {"id": "0a1b2c3d4e5f", "state": state, "held_at": held_at}
        job["waiting_on"] = None
        if launched is not None:
            job["launched"] = launched
        cases.append(job)
    return cases


def _ls_note(job: dict[str, Any]) -> str:
    """What ``danlu ls`` writes after ``job``'s state."""
    (cells,) = jobs_table([job], now=200.0).rows
    said = cells["state"].plain
    assert said.startswith(job["state"])
    return said[len(job["state"]) :]


def test_the_dashboard_and_ls_write_the_same_note(browser: Any) -> None:
    context = browser.new_context()
    try:
        tab = context.new_page()
        folder = resources.files("danlu.server") / "dashboard"
        for name in SCRIPTS:
            tab.add_script_tag(content=(folder / name).read_text())
        cases = _cases()
        notes: list[str] = tab.evaluate("(jobs) => jobs.map((job) => stateNote(job))", cases)
    finally:
        context.close()
    shown = [(job["state"], job.get("launched"), job["held_at"]) for job in cases]
    assert dict(zip(shown, [_ls_note(job) for job in cases], strict=True)) == dict(
        zip(shown, notes, strict=True)
    )
    assert " (held)" in notes and " (not launched)" in notes  # both notes are among the cases
