"""The dashboard's Jobs table says why a job that ended before it ran ended (the job's
``end_reason``: the reason of the event that ended it, as ``danlu ls`` says it): its "where /
why" was blank, then read from the events feed. In a real browser (the server and browser
fixtures of ``test_dashboard``); skipped without ``/usr/bin/chromium`` unless
``DANLU_TEST_REQUIRE_BROWSER`` is set."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_dashboard
from helpers import Live, spec, wait_state

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


OUT_OF_GPU_MEMORY = (
    "import sys\n"
    "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB',"
    " file=sys.stderr)\n"
    "sys.exit(1)\n"
)
"""A run that dies as torch does out of GPU memory (the executor reads the cause from its
log)."""


def test_a_run_out_of_gpu_memory_says_so_after_its_exit_code(live: Live, page: Any) -> None:
    """``exit 1: out of memory (exit code 1); ...`` as ``danlu ls`` says it, not ``exit 1``
    alone (the cause was only in the detail panel and the events); a run that merely
    failed still shows ``exit 1``."""
    from playwright.sync_api import expect

    with live.client() as c:
        oom = c.post("/jobs", json=spec("oom", OUT_OF_GPU_MEMORY, max_restarts=0)).json()
        bug = c.post("/jobs", json=spec("bug", "raise SystemExit(1)", max_restarts=0)).json()
        ended = wait_state(c, oom["id"], "FAILED")
        plain = wait_state(c, bug["id"], "FAILED")
    assert ended["exit_code"] == 1 and ended["end_reason"].startswith("out of memory (")
    assert plain["exit_code"] == 1 and plain["end_reason"].startswith("failed (exit code 1)")
    page.fill("#token", live.token)
    page.click("#login button")
    page.select_option("#filter", "all")
    row = page.locator(f'#jobs tr[data-job="{oom["id"]}"]')
    expect(row.locator("td.state")).to_have_text("FAILED")
    expect(row.locator("td").nth(8)).to_have_text(f"exit 1: {ended['end_reason']}")
    other = page.locator(f'#jobs tr[data-job="{bug["id"]}"]')
    expect(other.locator("td").nth(8)).to_have_text("exit 1")


def test_the_dashboard_and_the_cli_keep_one_list_of_plain_exits() -> None:
    """``jobs.js``'s ``PLAIN_EXITS`` is ``danlu ls``'s (:data:`danlu.cli.top.PLAIN_EXITS`)."""
    import danlu.server
    from danlu.cli.top import PLAIN_EXITS

    script = (Path(danlu.server.__file__).parent / "dashboard" / "jobs.js").read_text()
    found = re.search(r"^const PLAIN_EXITS = (\[.*?\]);$", script, re.MULTILINE)
    assert found is not None, "jobs.js has no PLAIN_EXITS"
    assert tuple(json.loads(found.group(1))) == PLAIN_EXITS
