"""The dashboard as its users meet it, in a real browser (the server and browser fixtures of
``test_dashboard``):

- a click on a button of a table clicks, however long the press: a refresh between the press
  and the release replaced the button, and the click did nothing (a press of 100 ms, one
  click in 20);
- a keyboard user's focus on a button of a table (a job's Cancel, a node's Drain) stays on
  that button across the refreshes every 2 s; each refresh's new rows threw it back to the
  top of the page, so that no button past the first few could be reached by keyboard;
- the Recent events table dates an event of another day; it showed the time of day only, so
  that an event of last week read as one of this morning;
- a server that cannot be reached says so (``no connection to the server``); the status line
  said only the browser's ``Failed to fetch``;
- all jobs are shown a page of 200 at a time, Newer and Older turning the pages.

Without ``/usr/bin/chromium`` these tests are skipped, unless ``DANLU_TEST_REQUIRE_BROWSER``
is set."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import test_dashboard
from helpers import Live, spec, wait_state

from danlu.core.job_array import array_sweep, parse_array

live = test_dashboard.live
browser = test_dashboard.browser

# counts the renders of the Cluster table (each refresh puts new rows in it)
_COUNT_RENDERS = """
window.renders = 0;
new MutationObserver(() => { window.renders += 1; }).observe(
  document.querySelector("#nodes tbody"), { childList: true });
"""
# the focused element, said as "<row's data-job or data-node>/<its data-action>"
_FOCUSED = """() => {
  const focused = document.activeElement;
  const row = focused && focused.closest("tr");
  if (!row) return focused ? focused.tagName : null;
  return (row.dataset.job || row.dataset.node) + "/" + focused.dataset.action;
}"""


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


def _sign_in(page: Any, live: Live) -> None:
    from playwright.sync_api import expect

    page.fill("#token", live.token)
    page.click("#login button")
    expect(page.locator("#main")).to_be_visible()


def _after_two_refreshes(page: Any) -> None:
    page.evaluate(_COUNT_RENDERS)
    page.wait_for_function("() => window.renders >= 2")


def test_a_focused_button_keeps_the_focus_across_refreshes(live: Live, page: Any) -> None:
    with live.client() as c:
        running = c.post("/jobs", json=spec("runs", "import time; time.sleep(60)")).json()
        wait_state(c, running["id"], "RUNNING")
    _sign_in(page, live)
    cancel = page.locator(f'#jobs tr[data-job="{running["id"]}"] button[data-action="cancel"]')
    cancel.focus()
    assert page.evaluate(_FOCUSED) == f"{running['id']}/cancel"
    _after_two_refreshes(page)
    assert page.evaluate(_FOCUSED) == f"{running['id']}/cancel"
    # a node's button too (its first row: the node's own buttons), and a GPU's on another row
    page.locator('#nodes tr[data-node="localhost"] button[data-action="drain"]').focus()
    _after_two_refreshes(page)
    assert page.evaluate(_FOCUSED) == "localhost/drain"
    close = page.locator('#nodes tr[data-node="localhost"] button[data-action="cordon-gpu"]')
    close.nth(1).focus()
    _after_two_refreshes(page)
    assert page.evaluate(_FOCUSED) == "localhost/cordon-gpu"
    assert page.evaluate("document.activeElement.textContent") == "Close GPU 1"


def test_a_click_pressed_across_refreshes_still_clicks(live: Live, page: Any) -> None:
    with live.client() as c:
        running = c.post("/jobs", json=spec("runs", "import time; time.sleep(60)")).json()
        wait_state(c, running["id"], "RUNNING")
    page.on("dialog", lambda dialog: dialog.accept())  # Cancel asks first
    _sign_in(page, live)
    page.locator(f'#jobs tr[data-job="{running["id"]}"] button[data-action="cancel"]').hover()
    page.mouse.down()
    _after_two_refreshes(page)
    page.mouse.up()
    with live.client() as c:
        wait_state(c, running["id"], "CANCELLED")


def test_an_event_of_another_day_shows_its_date(live: Live, page: Any) -> None:
    from playwright.sync_api import Route, expect

    with live.client() as c:
        job = c.post("/jobs", json=spec("old-news", "pass")).json()
        wait_state(c, job["id"], "SUCCEEDED")
    three_days = 3 * 86400

    def days_ago(route: Route) -> None:  # the feed as it reads three days later: all old
        events = route.fetch().json()
        for event in events:
            event["time"] -= three_days
        route.fulfill(json=events)

    page.route("**/api/v1/events?*", days_ago)
    _sign_in(page, live)
    rows = page.locator(f'#feed tr:has(td:text-is("{job["id"]}"))')
    expect(rows.first).to_be_visible()
    with live.client() as c:
        first = c.get(f"/jobs/{job['id']}/events").json()[0]["time"] - three_days
    day = page.evaluate("(t) => new Date(t * 1000).toLocaleDateString()", first)
    expect(rows.last.locator("td").first).to_contain_text(day)
    page.unroute("**/api/v1/events?*")  # today's: the time of day alone, as before
    expect(rows.last.locator("td").first).not_to_contain_text(day)
    today = page.evaluate("new Date().toLocaleDateString()")
    expect(rows.last.locator("td").first).not_to_contain_text(today)


def test_a_server_out_of_reach_is_said_to_be_out_of_reach(live: Live, page: Any) -> None:
    from playwright.sync_api import Route, expect

    _sign_in(page, live)

    def unreachable(route: Route) -> None:
        route.abort("connectionrefused")

    page.route("**/api/v1/cluster/nodes", unreachable)
    status = page.locator("#status")
    expect(status).to_contain_text("cannot refresh: no connection to the server (")
    expect(status).to_have_class("error")
    page.unroute("**/api/v1/cluster/nodes")
    expect(status).to_contain_text("updated")
    # signing in while the server is out of reach: said so, and tried again
    page.route("**/api/v1/users/me", unreachable)
    page.click("#logout")
    page.fill("#token", live.token)
    page.click("#login button")
    expect(status).to_contain_text("cannot sign in: no connection to the server (")
    expect(status).to_contain_text("; retrying")
    page.unroute("**/api/v1/users/me")
    expect(page.locator("#who")).to_have_text("admin (admin)")
    assert page.evaluate("sessionStorage.getItem('danlu-token')") == live.token  # kept


def test_all_jobs_are_reached_page_by_page(live: Live, page: Any) -> None:
    """Past the newest 200 of all jobs the dashboard had nothing to show: a job older than
    that (to read its log, or rerun it) could not be reached from the page."""
    from playwright.sync_api import expect

    with live.client() as c:  # a closed node: the 205 tasks wait
        c.post("/cluster/nodes/localhost/cordon", json={}).raise_for_status()
        array = c.post("/sweeps", json=array_sweep(spec("task", "pass"), parse_array("0-204")))
        assert array.json()["submitted"] == 205, array.text
        first, last = (c.get("/jobs", params={"name": f"task-{n}"}).json()[0] for n in (0, 204))
        oldest_shown = c.get("/jobs", params={"limit": 200}).json()[-1]
    _sign_in(page, live)
    pages, newer, older = (page.locator(f"#jobs-{n}") for n in ("pages", "newer", "older"))
    rows, note = page.locator("#jobs tbody tr"), page.locator("#jobs-note")
    expect(rows).to_have_count(200)
    expect(pages).to_be_hidden()  # the unfinished jobs: no pages
    page.select_option("#filter", "all")
    expect(note).to_have_text("showing the newest 200 jobs")
    expect(pages).to_be_visible()
    expect(newer).to_be_disabled()
    expect(page.locator(f'#jobs tr[data-job="{last["id"]}"]')).to_have_count(1)
    older.click()
    expect(rows).to_have_count(5)
    expect(note).to_have_text(
        f"page 2: the jobs submitted before job {oldest_shown['id']} (the oldest)"
    )
    expect(page.locator(f'#jobs tr[data-job="{first["id"]}"]')).to_have_count(1)
    expect(older).to_be_disabled()
    _after_two_refreshes(page)  # the refreshes keep the page
    expect(rows).to_have_count(5)
    newer.click()
    expect(rows).to_have_count(200)
    expect(note).to_have_text("showing the newest 200 jobs")
    expect(newer).to_be_disabled()
    expect(older).to_be_enabled()
    older.click()
    expect(rows).to_have_count(5)
    page.select_option("#filter", "unfinished")  # another filter: from its first page
    expect(pages).to_be_hidden()
    page.select_option("#filter", "all")
    expect(rows).to_have_count(200)
