"""The dashboard says a job's (or sweep's) state once where its reason follows it, as the
cli does (:func:`danlu.cli.markup.after_state`): a job's panel read ``RUNNING: running on
localhost:0``, the Events tables ``RUNNING -> CANCELLED`` beside ``cancelled by admin``, the
Sweeps table ``CANCELLED: cancelled by admin``. In a real browser (the server and browser
fixtures of ``test_dashboard``); skipped without ``/usr/bin/chromium`` unless
``DANLU_TEST_REQUIRE_BROWSER`` is set."""

from __future__ import annotations

import re
import time
from typing import Any

import test_dashboard
from helpers import Live, get_job, spec, wait_for, wait_state

from danlu.cli.markup import after_state, reason_after_state

live = test_dashboard.live
browser = test_dashboard.browser
page = test_dashboard.page  # a tab on the dashboard; no script error, no file missing

_SLEEP = "import time; time.sleep(60)"


CASES = [
    ("FAILED", "failed: oom"),
    ("FAILED", "Failed: oom"),
    ("FAILED", "failed:"),
    ("FAILED", "failed"),
    ("FAILED", "failed (exit code 3); out of restarts (0 of 0)"),
    ("FAILED", "failed (no exit code (killed)); out of restarts"),
    ("FAILED", "failed (unclosed"),
    ("CANCELLED", "cancelled by alice"),
    ("RUNNING", "running on n1:0"),
    ("FAILED", "failedover to node-1"),
    ("FAILED", "out of memory"),
    ("FAILED", ""),
    ("FAILED", None),
    (None, "none of its GPUs"),
]


def _sign_in(live: Live, page: Any) -> None:
    page.fill("#token", live.token)
    page.click("#login button")


def test_the_page_s_rule_is_the_cli_s(page: Any) -> None:
    """``afterState`` / ``reasonAfterState`` of ``common.js`` say what the cli's do."""
    for state, reason in CASES:
        page_said = page.evaluate(
            "([s, r]) => [afterState(s, r), reasonAfterState(s, r)]",
            [
                state,
                reason,
            ],
        )
        assert page_said == [after_state(state, reason), reason_after_state(state, reason)], (
            state,
            reason,
        )


def test_a_job_s_panel_and_the_events_say_its_state_once(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        job = c.post("/jobs", json=spec("sleeper", _SLEEP)).json()
        wait_state(c, job["id"], "RUNNING")
        # its run launched: until then its why says "placed on localhost:0, launching"
        wait_for(lambda: get_job(c, job["id"])["launched"])
        why = c.get(f"/jobs/{job['id']}/why").json()["reason"]
    assert why.startswith("running on ")
    _sign_in(live, page)
    page.click(f'#jobs tr[data-job="{job["id"]}"] button[data-action="show"]')
    expect(page.locator("#detail-why")).to_have_text(f"RUNNING{why[len('running') :]}")
    with live.client() as c:
        c.post(f"/jobs/{job['id']}/cancel").raise_for_status()
        wait_state(c, job["id"], "CANCELLED")
    feed = page.locator("#feed tbody tr", has_text="RUNNING -> CANCELLED")
    expect(feed.locator("td").nth(5)).to_have_text("by admin")
    # the open panel is followed until its job ended (the Jobs table lists unfinished ones)
    expect(page.locator("#detail-why")).to_contain_text("CANCELLED by admin")
    ended = page.locator("#events tbody tr", has_text="CANCELLED")
    expect(ended.locator("td").nth(2)).to_have_text("by admin")


def test_a_cancelled_sweep_says_its_state_once(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    with live.client() as c:
        sweep = {
            "name": "lr",
            "trial": spec("trial", _SLEEP),
            "parameters": {"lr": {"values": [0.1]}},
            "metric": {"name": "loss", "goal": "minimize"},
            "method": "grid",
        }
        created = c.post("/sweeps", json=sweep).json()
        c.post(f"/sweeps/{created['id']}/cancel").raise_for_status()
        deadline = time.monotonic() + 30
        while c.get(f"/sweeps/{created['id']}").json()["state"] != "CANCELLED":
            assert time.monotonic() < deadline
            time.sleep(0.2)
    _sign_in(live, page)
    row = page.locator(f'#sweeps tr[data-sweep="{created["id"]}"]')
    expect(row.locator("td.state")).to_have_text("CANCELLED by admin")
    row.locator('button[data-action="show-sweep"]').click()
    expect(page.locator("#sweep-title")).to_contain_text(
        f"sweep lr ({created['id']}): CANCELLED by admin; "
    )


def test_a_placed_job_not_launched_says_so_once(live: Live, page: Any) -> None:
    """A RUNNING job whose run is not launched (the API's ``launched`` false; the server's
    answers for a running job rewritten so) reads ``RUNNING (not launched)`` in the Jobs table
    and its panel, as ``danlu ls`` says it; where its reason says so already (its cluster
    cannot be reached, or another job's run still holds its GPU), the panel says it once."""
    from playwright.sync_api import Route, expect

    with live.client() as c:
        job = c.post("/jobs", json=spec("placed", _SLEEP)).json()
        wait_state(c, job["id"], "RUNNING")
        # its run launched: its why is "running on localhost:0" (the answers rewritten below)
        wait_for(lambda: get_job(c, job["id"])["launched"])
    said: list[str] = []  # the reason /why answers from when one is set: the newest

    def not_launched(route: Route) -> None:
        answer = route.fetch()
        body = answer.json()
        if route.request.url.endswith("/why"):
            body["reason"] = said[-1] if said else body["reason"]
        for row in body if isinstance(body, list) else [body]:
            if row.get("id") == job["id"] and "state" in row and "reason" not in row:
                row["launched"] = False
        route.fulfill(response=answer, json=body)

    page.route(re.compile(rf"/api/v1/jobs(\?.*|/{job['id']}|/{job['id']}/why)$"), not_launched)
    _sign_in(live, page)
    row = page.locator(f'#jobs tr[data-job="{job["id"]}"]')
    expect(row.locator("td.state")).to_have_text("RUNNING (not launched)")
    row.locator('button[data-action="show"]').click()
    expect(page.locator("#detail-why")).to_have_text("RUNNING (not launched) on localhost:0")
    said.append("not launched: the cluster cannot be reached (down); placed on localhost:0")
    row.locator('button[data-action="show"]').click()  # read again now, not at the refresh
    expect(page.locator("#detail-why")).to_have_text(f"RUNNING: {said[-1]}")
    said.append("placed on localhost:0, not launched yet: waiting for job a1 to free localhost:0")
    row.locator('button[data-action="show"]').click()
    expect(page.locator("#detail-why")).to_have_text(f"RUNNING: {said[-1]}")
    said.append("placed on localhost:0, launching")  # not said in the reason: the note is
    row.locator('button[data-action="show"]').click()
    expect(page.locator("#detail-why")).to_have_text(f"RUNNING (not launched): {said[-1]}")
    # a refresh in flight when the page closes: its answer is gone, not an error of the test
    page.unroute_all(behavior="ignoreErrors")
