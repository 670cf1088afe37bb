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


def test_the_table_says_held_or_waiting_once(scripts: Any) -> None:
    """A queued job's why is beside its state: held or waiting is not said twice (``PENDING
    (held)`` beside ``held by alice``), but where the why says something else."""
    queued = {"state": "PENDING", "launched": True, "held_at": None, "waiting_on": None}
    held = queued | {"held_at": 150.0}
    waiting = queued | {"waiting_on": "a1b2"}
    assert _table_note(scripts, held | {"pending_reason": "held by alice"}) == ""
    assert _table_note(scripts, held | {"pending_reason": "owner bob is disabled"}) == " (held)"
    named = {"pending_reason": "waiting for sweep a1b2 (lr) to succeed"}
    assert _table_note(scripts, waiting | named) == ""
    assert _table_note(scripts, waiting | {"pending_reason": "owner bob is disabled"}) == (
        " (waiting)"
    )


STATES = ("PENDING", "RUNNING", "PREEMPTING", "RESTARTING", "SUCCEEDED", "FAILED", "CANCELLED")
DEPENDENCY = "0a1b2c3d4e60"
"""The job a waiting job of :func:`_cases` waits for (its ``waiting_on``)."""
REASONS = (
    None,
    "held by alice",
    "held",
    "helder",
    f"waiting for job {DEPENDENCY} (prep) to succeed",
    f"waiting for array {DEPENDENCY} (tasks) to succeed; memory estimate skipped",
    "waiting for job 0a1b2c3d4e61 (other) to succeed",
    "waiting for 1 GPU(s)",
    "owner alice is disabled: not started until an admin enables them",
)
"""The ``pending_reason`` of the jobs of :func:`_cases`: the server's words for a held job,
for one waiting for a dependency (this one or another), and for neither."""


def _cases() -> list[dict[str, Any]]:
    """Each state, launched true, false or not sent, held or not, waiting for a dependency or
    not, with each of :data:`REASONS`."""
    cases = []
    for state, launched, held_at, waiting_on, reason in product(
        STATES, (True, False, None), (None, 150.0), (None, DEPENDENCY), REASONS
    ):
        job: dict[str, Any] = {"id": "0a1b2c3d4e5f", "state": state, "held_at": held_at}
        job |= {"waiting_on": waiting_on, "pending_reason": reason}
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
    held or not, waiting for a dependency or not, with a why that says so or another,
    ``stateNote`` and :func:`danlu.cli.job_table.jobs_table`'s state cell write the same
    note (the dashboard said ``RUNNING (held)`` of a held job whose run launched, ``danlu
    ls`` plain ``RUNNING``; the dashboard said ``PENDING (waiting)``, ``danlu ls`` plain
    ``PENDING``)."""
    cases = _cases()
    notes: list[str] = scripts.evaluate("(jobs) => jobs.map((job) => stateNote(job))", cases)
    keys = ("state", "launched", "held_at", "waiting_on", "pending_reason")
    shown = [tuple(job.get(key) for key in keys) for job in cases]
    assert dict(zip(shown, [_ls_note(job) for job in cases], strict=True)) == dict(
        zip(shown, notes, strict=True)
    )
    # each note is among the cases, and none said twice: said, and left out where the why
    # beside it says it already
    assert {" (held)", " (not launched)", " (waiting)", ""} == set(notes)
