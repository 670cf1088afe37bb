"""What the dashboard writes after a job's state when its run is not launched, as ``danlu ls``
and the API say it (the API's ``launched`` false for a job holding GPUs, RUNNING or
PREEMPTING): the Jobs table's ``stateNote`` (``jobs.js``) said ``(held)`` over ``(not
launched)`` for a held job whose run never launched, and neither table nor panel
(``panelNote``, ``detail.js``) said it of a PREEMPTING one. Not launched wins: a job whose
run never launched holds no run to checkpoint, and its why says it is held. The functions
of the dashboard's own scripts, run in Chromium on a blank page (no server); skipped
without ``/usr/bin/chromium`` unless ``DANLU_TEST_REQUIRE_BROWSER`` is set."""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from itertools import product
from typing import Any

import pytest
import test_dashboard

from danlu.cli.job_table import jobs_table

browser = test_dashboard.browser

SCRIPTS = ("api.js", "common.js", "jobs.js", "detail.js")
"""The page's scripts that define the notes, in the page's order (``app.js``, which starts
the page, left out)."""
STOPPED = "placed on n1:0, not launched: stopped before its launch, nothing ran to checkpoint"


@pytest.fixture
def scripts(browser: Any) -> Iterator[Any]:
    """A blank page with :data:`SCRIPTS` loaded."""
    context = browser.new_context()
    try:
        tab = context.new_page()
        folder = resources.files("danlu.server") / "dashboard"
        for name in SCRIPTS:
            tab.add_script_tag(content=(folder / name).read_text())
        yield tab
    finally:
        context.close()


def _table_note(page: Any, job: dict[str, Any]) -> str:
    """What the Jobs table writes after ``job``'s state."""
    said: str = page.evaluate("(job) => stateNote(job)", job)
    return said


def _panel_note(page: Any, job: dict[str, Any], reason: str) -> str:
    """What ``job``'s panel writes after its state, its why being ``reason``."""
    said: str = page.evaluate("([job, reason]) => panelNote(job, reason)", [job, reason])
    return said


def test_not_launched_wins_over_held_and_is_said_of_a_preempting_job(scripts: Any) -> None:
    held = {"state": "RUNNING", "launched": False, "held_at": 5.0, "waiting_on": None}
    stopped = {"state": "PREEMPTING", "launched": False, "held_at": None, "waiting_on": None}
    assert _table_note(scripts, held) == " (not launched)"
    assert _table_note(scripts, stopped) == " (not launched)"
    held_why = "placed on n1:0, launching; held: preempted by checkpoint next round, it waits"
    assert _panel_note(scripts, held, held_why) == " (not launched)"
    # its why says it already: the panel does not say it twice
    assert _panel_note(scripts, stopped, STOPPED) == ""
    # launched, or a server older than the field: as before
    for launched in (True, None):
        ran = {"state": "RUNNING", "launched": launched, "held_at": 5.0, "waiting_on": None}
        assert _table_note(scripts, ran) == " (held)"
        assert _panel_note(scripts, ran, "running on n1:0") == ""
        checkpointing = ran | {"state": "PREEMPTING", "held_at": None}
        assert _table_note(scripts, checkpointing) == ""
        assert _panel_note(scripts, checkpointing, "checkpointing before re-queue on n1:0") == ""
    queued = {"state": "PENDING", "launched": True, "held_at": None, "waiting_on": "a1"}
    assert _table_note(scripts, queued) == " (waiting)"


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


def test_the_dashboard_and_ls_write_the_same_note(scripts: Any) -> None:
    """For each state a job has, launched or not (or from a server older than the field),
    held or not, ``stateNote`` and :func:`danlu.cli.job_table.jobs_table`'s state cell write
    the same note (the dashboard said ``RUNNING (held)`` of a held job whose run launched,
    ``danlu ls`` plain ``RUNNING``). Jobs waiting for a dependency are left out: ``danlu ls``
    says that in its why only."""
    cases = _cases()
    notes: list[str] = scripts.evaluate("(jobs) => jobs.map((job) => stateNote(job))", cases)
    shown = [(job["state"], job.get("launched"), job["held_at"]) for job in cases]
    assert dict(zip(shown, [_ls_note(job) for job in cases], strict=True)) == dict(
        zip(shown, notes, strict=True)
    )
    assert " (held)" in notes and " (not launched)" in notes  # both notes are among the cases
