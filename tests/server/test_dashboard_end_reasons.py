"""The dashboard's Jobs table says why a job that ended before it ran ended (the job's
``end_reason``: the reason of the event that ended it, as ``danlu ls`` says it): its "where /
why" was blank, then read from the events feed. In a real browser (the server and browser
fixtures of ``test_dashboard``); skipped without ``/usr/bin/chromium`` unless
``DANLU_TEST_REQUIRE_BROWSER`` is set."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import test_dashboard
from helpers import Live, spec

live = test_dashboard.live
browser = test_dashboard.browser


@pytest.fixture
def page(live: Live, browser: Any) -> Iterator[Any]:
    """A new tab on the dashboard; no error of its script goes unseen."""
    context = browser.new_context()
    try:
        tab = context.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.goto(f"{live.url}/")
        yield tab
        assert errors == []
    finally:
        context.close()


def test_a_job_cancelled_before_it_ran_says_why(live: Live, page: Any) -> None:
    from playwright.sync_api import expect

    with live.client() as c:  # queued on a closed node, then cancelled: it never ran
        c.post("/cluster/nodes/localhost/cordon", json={}).raise_for_status()
        job = c.post("/jobs", json=spec("never-ran", "pass")).json()
        c.post(f"/jobs/{job['id']}/cancel").raise_for_status()
        c.post("/cluster/nodes/localhost/uncordon").raise_for_status()
        ended = c.get(f"/jobs/{job['id']}").json()
        assert ended["pending_reason"] is None and ended["exit_code"] is None
    assert ended["end_reason"] == "cancelled by admin"
    feeds: list[str] = []
    page.on("request", lambda r: feeds.append(r.url) if "/api/v1/events" in r.url else None)
    page.fill("#token", live.token)
    page.click("#login button")
    page.select_option("#filter", "all")
    row = page.locator(f'#jobs tr[data-job="{job["id"]}"]')
    expect(row.locator("td.state")).to_have_text("CANCELLED")
    expect(row.locator("td").nth(8)).to_have_text("cancelled by admin (before it ran)")
    # the feed is read for the Events panel only (its newest events), not for the reasons
    assert feeds and all("tail=true" in url and "since=" not in url for url in feeds), feeds


def test_a_share_of_a_gpu_shows_as_its_fraction(live: Live, page: Any) -> None:
    """As ``danlu ls`` shows it: ``0.25``, not ``1`` (its request is a share of one GPU)."""
    from playwright.sync_api import expect

    with live.client() as c:
        c.post("/cluster/nodes/localhost/cordon", json={}).raise_for_status()
        quarter = spec("quarter", "pass", resources={"gpu_fraction": 0.25})
        share = c.post("/jobs", json=quarter).json()
        assert share["gpus"] == 1, share
    page.fill("#token", live.token)
    page.click("#login button")
    row = page.locator(f'#jobs tr[data-job="{share["id"]}"]')
    expect(row.locator("td").nth(6)).to_have_text("0.25")
