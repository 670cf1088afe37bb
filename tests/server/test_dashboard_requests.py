"""The dashboard's requests in a real browser (the server and browser fixtures of
``test_dashboard``): a request the server never answers (a stopped process, a proxy that
holds the connection) ends in an error on the page after the dashboard's time limit, and the
page refreshes again once the server answers; before, the page went on saying "updated" at
the time of its last answer while it showed what had long changed, and never asked again.
The page's own hints name commands that exist.

Without ``/usr/bin/chromium`` these tests are skipped, unless ``DANLU_TEST_REQUIRE_BROWSER``
is set."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import test_dashboard
from helpers import Live, spec

live = test_dashboard.live
browser = test_dashboard.browser


@pytest.fixture
def page(live: Live, browser: Any) -> Iterator[Any]:
    """A new tab on the dashboard with a clock the test moves on; dialogs accepted."""
    context = browser.new_context()
    try:
        tab = context.new_page()
        tab.clock.install()  # time flows, and the test may jump it forward
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.on("dialog", lambda dialog: dialog.accept())
        tab.goto(f"{live.url}/")
        yield tab
        assert errors == []
    finally:
        context.close()


def test_a_request_never_answered_is_an_error_and_the_page_refreshes_again(
    live: Live, page: Any
) -> None:
    from playwright.sync_api import Route, expect

    page.fill("#token", live.token)
    page.click("#login button")
    expect(page.locator("#who")).to_have_text("admin (admin)")
    expect(page.locator("#status")).to_contain_text("updated")
    held: list[Route] = []
    page.route("**/api/v1/cluster/nodes", lambda route: held.append(route))  # never answered
    page.clock.fast_forward(2_500)  # the next refresh asks, and waits
    for _ in range(100):  # the route's handler runs while Playwright waits
        if held:
            break
        page.wait_for_timeout(100)
    assert held, "the refresh asked for the nodes"
    page.clock.fast_forward(31_000)  # past the dashboard's time limit for one request
    status = page.locator("#status")
    expect(status).to_contain_text("cannot refresh: no answer from the server")
    expect(status).to_have_class("error")
    page.unroute("**/api/v1/cluster/nodes")
    with live.client() as c:  # what changed meanwhile shows once the server answers again
        job = c.post("/jobs", json=spec("after-the-outage", "import time; time.sleep(60)")).json()
    page.clock.fast_forward(2_500)
    expect(page.locator(f'#jobs tr[data-job="{job["id"]}"]')).to_have_count(1)
    expect(status).to_contain_text("updated")
    expect(status).not_to_have_class("error")


def test_the_jobs_note_names_a_command_that_lists_them_all(live: Live) -> None:
    """The note under a cut Jobs table named ``danlu jobs``, which does not exist."""
    script = httpx.get(f"{live.url}/dashboard/jobs.js").text  # the unfinished jobs' note
    assert "danlu jobs" not in script
    assert '"danlu ls --all --state PENDING lists every pending one"' in script
    assert '"danlu ls --all lists every job"' in script


def test_an_action_s_error_stays_in_the_status_line_after_the_next_refresh(
    live: Live, page: Any
) -> None:
    """A refused action's error was wiped by the next refresh's "updated ..." at most 2 s
    later: a user who looked away for a moment never learnt that the Cancel had failed."""
    from playwright.sync_api import Route, expect

    with live.client() as c:
        job = c.post("/jobs", json=spec("stays", "import time; time.sleep(60)")).json()
    refusal = {"error": {"type": "conflict", "field": None, "message": "the cancel was refused"}}

    def refuse(route: Route) -> None:
        route.fulfill(status=409, json=refusal)

    page.route(f"**/api/v1/jobs/{job['id']}/cancel", refuse)
    page.fill("#token", live.token)
    page.click("#login button")
    row = page.locator(f'#jobs tr[data-job="{job["id"]}"]')
    row.locator('button[data-action="cancel"]').click()
    status = page.locator("#status")
    expect(status).to_contain_text(f"cancel {job['id']}: the cancel was refused")
    page.clock.fast_forward(5_000)  # two refreshes later
    expect(status).to_contain_text("updated")
    expect(status).to_contain_text(f"cancel {job['id']}: the cancel was refused")
    expect(status).to_have_class("error")
    page.unroute(f"**/api/v1/jobs/{job['id']}/cancel")
    row.locator('button[data-action="cancel"]').click()  # the next action clears it
    expect(row).to_have_count(0, timeout=15_000)  # cancelled: gone from the unfinished jobs
    expect(status).not_to_contain_text("refused")
    expect(status).not_to_have_class("error")


def test_a_fake_node_is_said_to_be_fake(live: Live, page: Any) -> None:
    """``danlu nodes`` and ``danlu top`` mark a node of fake GPUs "(fake)"; the dashboard
    showed it as a real one, so its user could take fake GPUs for the host's."""
    from playwright.sync_api import expect

    with live.client() as c:
        assert all(node["fake"] for node in c.get("/cluster/nodes").json())
    page.fill("#token", live.token)
    page.click("#login button")
    first = page.locator("#nodes tbody tr").first.locator("td").first
    expect(first).to_have_text("localhost (fake)")
    expect(page.locator("#nodes tbody tr").nth(1).locator("td").first).to_have_text("")
